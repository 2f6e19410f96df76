"""The official Kubernetes Python client (PyPI `kubernetes`) against an API server.

Usage: python python_client.py KUBECONFIG NAMESPACE

Each step asserts what kube-apiserver answers and prints `ok <step>`; the Rust test
(`api_kubectl.rs`) checks that every step printed it and that the exit code is 0.
"""

import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

kubeconfig, ns = sys.argv[1], sys.argv[2]
api = config.new_client_from_config(config_file=kubeconfig)
core = client.CoreV1Api(api)
apps = client.AppsV1Api(api)


def step(name):
    print("ok", name, flush=True)


def names(items):
    return sorted(i.metadata.name for i in items)


def api_error(call):
    try:
        call()
    except ApiException as e:
        return e
    raise AssertionError("the call succeeded; an error was expected")


# create
core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
for i in range(5):
    labels = {"app": "demo", "tier": "a" if i % 2 == 0 else "b"}
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=f"cm-{i}", labels=labels), data={"i": str(i)}
    )
    created = core.create_namespaced_config_map(ns, body)
    assert created.metadata.resource_version, created.metadata
    assert created.data == {"i": str(i)}, created.data
step("create")

# label selectors: equality, set-based, inequality and existence
got = names(core.list_namespaced_config_map(ns, label_selector="app=demo,tier=a").items)
assert got == ["cm-0", "cm-2", "cm-4"], got
got = names(core.list_namespaced_config_map(ns, label_selector="tier in (b)").items)
assert got == ["cm-1", "cm-3"], got
got = names(core.list_namespaced_config_map(ns, label_selector="app,tier!=a").items)
assert got == ["cm-1", "cm-3"], got
got = names(core.list_namespaced_config_map(ns, label_selector="!app").items)
assert "cm-0" not in got, got
step("label selectors")

# pagination: limit and continue, every object once
seen, token, pages = [], None, 0
while True:
    kwargs = {"limit": 2, "label_selector": "app=demo"}
    if token:
        kwargs["_continue"] = token
    page = core.list_namespaced_config_map(ns, **kwargs)
    pages += 1
    seen += [c.metadata.name for c in page.items]
    token = page.metadata._continue
    if not token:
        break
assert pages == 3, (pages, seen)
assert sorted(seen) == [f"cm-{i}" for i in range(5)], seen
step("pagination")

# strategic merge patch: containers merged by name, not replaced as a list
deployment = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "a", "image": "localhost/oneinfra/pause:1"},
                    {"name": "b", "image": "localhost/oneinfra/pause:1"},
                ]
            },
        },
    },
}
apps.create_namespaced_deployment(ns, deployment)
patched = apps.patch_namespaced_deployment(
    "web",
    ns,
    {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "localhost/oneinfra/pause:2"}]}}}},
    _content_type="application/strategic-merge-patch+json",
)
images = {c.name: c.image for c in patched.spec.template.spec.containers}
assert images == {"a": "localhost/oneinfra/pause:1", "b": "localhost/oneinfra/pause:2"}, images
step("strategic merge patch")

# a watch from a resourceVersion: what changed after it, in order, and nothing before it
since = core.list_namespaced_config_map(ns).metadata.resource_version
core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-w")))
core.patch_namespaced_config_map("cm-1", ns, {"data": {"i": "changed"}})
core.delete_namespaced_config_map("cm-2", ns)
events = []
w = watch.Watch()
for event in w.stream(core.list_namespaced_config_map, ns, resource_version=since, timeout_seconds=10):
    events.append((event["type"], event["object"].metadata.name))
    if len(events) == 3:
        w.stop()
assert events == [("ADDED", "cm-w"), ("MODIFIED", "cm-1"), ("DELETED", "cm-2")], events
# Older releases of this client spell the flag `watch=True`; kube-apiserver takes any value
# but `0` and `false` as true, so the same watch must answer.
url = f"{api.configuration.host}/api/v1/namespaces/{ns}/configmaps?watch=True&resourceVersion={since}&timeoutSeconds=2"
answer = api.rest_client.request("GET", url, headers={"Accept": "application/json"}, _request_timeout=10)
lines = [line for line in answer.read().decode().splitlines() if line.strip()]
assert len(lines) == 3 and '"type":"ADDED"' in lines[0].replace(" ", ""), lines
step("watch from a resourceVersion")

# an update carrying a stale resourceVersion is a 409 Conflict
stale = core.read_namespaced_config_map("cm-3", ns)
fresh = core.read_namespaced_config_map("cm-3", ns)
fresh.data = {"i": "first"}
core.replace_namespaced_config_map("cm-3", ns, fresh)
stale.data = {"i": "second"}
e = api_error(lambda: core.replace_namespaced_config_map("cm-3", ns, stale))
assert e.status == 409, (e.status, e.body)
assert '"reason":"Conflict"' in e.body.replace(" ", ""), e.body
assert core.read_namespaced_config_map("cm-3", ns).data == {"i": "first"}
step("409 on a stale update")

# delete, then 404
core.delete_namespaced_config_map("cm-3", ns)
e = api_error(lambda: core.read_namespaced_config_map("cm-3", ns))
assert e.status == 404, (e.status, e.body)
assert '"reason":"NotFound"' in e.body.replace(" ", ""), e.body
step("delete and 404")
