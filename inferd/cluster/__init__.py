"""Scale-out on Ray Serve (optional extra `inferd[cluster]`): the same HTTP faces as the
Serve ingress, one Serve deployment per model whose replicas run inferd's own engine.

    config.py     the cluster config file (pure)
    bridge.py     one forwarded request through an ASGI app in-process (pure asyncio)
    forward.py    the ingress's forwarder middleware (pure ASGI)
    ingress.py    the ingress app: inferd's create_app + forwarder + /load, /metrics
    serve_app.py  the Serve deployments (replica, ingress, load board)    -- imports ray
    router.py     replica choice: prompt affinity, then power of two       -- imports ray
    deploy.py     connect, deploy, status, delete
    cli.py        `inferd serve --ray`, `inferd cluster ...`
"""
