"""deploy/: the compose stack, its load balancer and the Kubernetes manifests are wired as the app needs — read
from the files themselves, no Docker engine or cluster needed (the stack itself runs in test_compose.py).

The Kubernetes manifests are checked against Kubernetes' own schemas with kubernetes-validate (offline; kubectl's
client-side dry run needs an API server for its discovery, so it cannot check them here)."""

import re
from pathlib import Path

import pytest
import yaml

from sharding_lab import settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s_documents() -> list[dict]:
    """Every manifest kustomization.yaml lists, in its order."""
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    documents = []
    for name in kustomization["resources"]:
        documents += [d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d]
    return documents


def by_kind(kind: str) -> list[dict]:
    return [d for d in k8s_documents() if d["kind"] == kind]


def test_compose_runs_replicas_behind_a_balancer_with_one_database_and_one_cache():
    services = compose()["services"]
    assert set(services) == {"app", "lb", "db"}
    app, lb, db = services["app"], services["lb"], services["db"]
    assert app["build"]["dockerfile"] == "Dockerfile" and app["build"]["context"] == ".."
    assert app["deploy"]["replicas"] >= 2
    env = app["environment"]
    # Every variable the app is given is one the app reads (a typo would be silently ignored).
    assert set(env) <= {s.name for s in settings.ALL}
    assert (
        env["SHARDING_LAB_DATABASE_URL"].startswith("postgresql://lab:")
        and "@db:5432/lab" in env["SHARDING_LAB_DATABASE_URL"]
    )
    assert db["environment"]["POSTGRES_USER"] == "lab" and db["environment"]["POSTGRES_DB"] == "lab"
    # One compilation cache, on a volume every replica mounts where the app looks for it.
    assert f"cache:{env['SHARDING_LAB_CACHE_DIR']}" in app["volumes"]
    assert "cache" in compose()["volumes"] and "pgdata" in compose()["volumes"]
    # Started in order, each once healthy: the database, the replicas (nginx reads their addresses at its start).
    assert app["depends_on"]["db"]["condition"] == "service_healthy"
    assert lb["depends_on"]["app"]["condition"] == "service_healthy"
    assert "/_stcore/health" in " ".join(app["healthcheck"]["test"])
    for image in ("postgres", "nginx"):
        assert "HEALTHCHECK" in (DEPLOY / image / "Dockerfile").read_text()
    # The stack is built on the app's own base image only (Docker Hub may be out of reach: one image to bring).
    base = re.search(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.M).group(1)
    assert lb["build"]["args"]["BASE"] == db["build"]["args"]["BASE"] == base


def test_the_balancer_keeps_a_browser_on_its_replica_and_passes_websockets():
    config = "\n".join(line.split("#")[0] for line in (DEPLOY / "nginx" / "nginx.conf").read_text().splitlines())
    # Stickiness by a random cookie set on the first request (not ip_hash: a school's NAT is one address).
    assert re.search(r"map \$cookie_lab_replica \$sticky_key \{\s*\"\"\s+\$request_id;", config)
    assert "hash $sticky_key consistent;" in config and "ip_hash" not in config
    assert 'add_header Set-Cookie "lab_replica=$sticky_key;' in config
    # Streamlit's websocket: the upgrade headers, the Host with its port (Streamlit compares it with the Origin),
    # and a read timeout of a lesson rather than nginx's 60 s.
    assert "proxy_set_header Upgrade $http_upgrade;" in config
    assert "proxy_set_header Connection $connection_upgrade;" in config
    assert "proxy_set_header Host $http_host;" in config
    assert "proxy_read_timeout 1d;" in config
    # A replica that stops answering: its browsers go to the others.
    assert re.search(r"proxy_next_upstream error timeout", config)
    assert "server app:8501" in config  # compose's service name: every replica


def test_the_kubernetes_manifests_pass_kubernetes_schemas():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for document in k8s_documents():
        kubernetes_validate.validate(document, "1.32.0", strict=True)  # raises on the first problem


def test_the_kubernetes_manifests_are_wired_together():
    (deployment,) = by_kind("Deployment")
    service = next(s for s in by_kind("Service") if s["metadata"]["name"] == "sharding-lab")
    (ingress,) = by_kind("Ingress")
    (claim,) = by_kind("PersistentVolumeClaim")
    (secret,) = by_kind("Secret")
    (statefulset,) = by_kind("StatefulSet")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["replicas"] >= 2
    # Sticky: the ingress keeps a browser on its pod by cookie; websockets stay open for a lesson.
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}
    # The cache volume is the shared claim, mounted where SHARDING_LAB_CACHE_DIR points.
    env = {e["name"]: e for e in container["env"]}
    assert set(env) <= {s.name for s in settings.ALL}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "cache")
    assert mount["mountPath"] == env["SHARDING_LAB_CACHE_DIR"]["value"]
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "cache")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    # Every secret a pod reads is in the Secret; the database URL names the PostgreSQL service.
    for pod in (deployment, statefulset):
        for entry in pod["spec"]["template"]["spec"]["containers"][0]["env"]:
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    postgres_service = next(
        s for s in by_kind("Service") if s["metadata"]["name"] == statefulset["spec"]["serviceName"]
    )
    assert f"@{postgres_service['metadata']['name']}:5432/" in secret["stringData"]["SHARDING_LAB_DATABASE_URL"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/_stcore/health"
