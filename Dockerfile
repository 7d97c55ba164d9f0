# Sharding Lab for a classroom: one container serves the app on port 8501.
#
#   docker build -t sharding-lab .
#   docker run --rm -p 8501:8501 sharding-lab
#   docker run --rm -p 8501:8501 -e SHARDING_LAB_MAX_JOBS=8 -e SHARDING_LAB_DEVICES=16 sharding-lab
#   docker build --build-arg GPU_COMPILER=1 -t sharding-lab .   # + the GPU compiler for h100/h200 targets (~5 GB)
#
# Pinned base: the newest stack (Python 3.13, the Python constraints-py312.txt was checked with: JAX 0.12.1,
# Flax 0.12.12), Debian 12 slim. The Python 3.11 / JAX 0.10.2 stack is constraints.txt (docs/versions.md).
FROM python:3.13.0-slim-bookworm

# SHARDING_LAB_DEVICES: simulated host devices (1-64). SHARDING_LAB_MAX_JOBS: training runs the
# server allows at once (more are told "busy"). SHARDING_LAB_JOB_TIME_LIMIT_S: longest run.
# SHARDING_LAB_UNWATCHED_LIMIT_S: a run nobody looks at (tab closed) stops after this long.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SHARDING_LAB_DEVICES=8 \
    SHARDING_LAB_MAX_JOBS=4 \
    SHARDING_LAB_JOB_TIME_LIMIT_S=300 \
    SHARDING_LAB_UNWATCHED_LIMIT_S=30 \
    SHARDING_LAB_CACHE_DIR=/app/cache

WORKDIR /app

# Dependencies first (pyproject.toml's, every version held by constraints-py312.txt), so code changes do not
# reinstall them. The TPU compiler (libtpu, for the TPU compile targets) always; the GPU compiler only with
# GPU_COMPILER=1. The app runs from /app (`streamlit run app.py`), so the package itself is not installed.
ARG GPU_COMPILER=0
COPY pyproject.toml constraints-py312.txt ./
RUN extras=tpu && if [ "$GPU_COMPILER" = 1 ]; then extras=tpu,gpu; fi \
    && python -c "import sys, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + [d for e in sys.argv[1].split(',') for d in p['optional-dependencies'][e]]))" \
       "$extras" > /tmp/dependencies.txt \
    && pip install --no-cache-dir -c constraints-py312.txt -r /tmp/dependencies.txt && rm /tmp/dependencies.txt

# A fixed numeric uid/gid, so `docker run --user` and volume permissions are predictable. The code
# stays owned by root: the app user can read it, not change it.
RUN groupadd --gid 10001 lab \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin lab
COPY . .
# What a class clicks first (the default layout, then the MLP under every preset on every two-axis mesh of 8
# devices and fewer) compiled into the image's compilation cache, one process per core, so a fresh container's
# first class does not wait for the compiler; the server compiles the rest (three-axis meshes, the
# transformer) in the background after it starts. The whole class set at build time (`warm` without
# --first) took 52 min on a 2-core machine. The cache stays writable by the app user (mount a volume on
# /app/cache to keep what a class adds). WARM_CACHE=0 skips it (a faster build; the server warms it all).
ARG WARM_CACHE=1
RUN if [ "$WARM_CACHE" = 1 ]; then python -m sharding_lab.server.warm --first; fi \
    && mkdir -p /app/cache && chown -R 10001:10001 /app/cache
USER 10001:10001

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read() != b'ok')"]
CMD ["streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501"]
