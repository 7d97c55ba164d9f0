"""Lessons built on the backend: Explicit axes op by op (:mod:`.explicit`), one step written three ways
(:mod:`.third_way`), strategies side by side (:mod:`.compare`), and challenges that check themselves
(:mod:`.challenges`)."""
