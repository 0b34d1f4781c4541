"""What the deployment files turn into, for the deploy tests: the kustomize base rendered by the real
`kubectl kustomize`, the Helm chart rendered by Helm's own engine (helm-python-sdk: Helm's Go SDK as a library,
`Chart.render` is `helm template`, values.schema.json checked as `helm template` checks it), and the checks an API
server would make that need no server: Kubernetes' OpenAPI schemas (kubernetes-validate), the Prometheus
Operator's CRD schemas for ServiceMonitor and PrometheusRule (fixtures/samples/prometheus-operator), and the
security-context rules of the API server's own validation that no schema carries."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "deploy" / "kubernetes"
CHART = ROOT / "deploy" / "helm" / "fleettool"
DASHBOARD = ROOT / "deploy" / "grafana" / "fleettool.json"
CRD_SCHEMAS = ROOT / "fixtures" / "samples" / "prometheus-operator"
CRD_KINDS = {"ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}


class _StrictLoader(yaml.SafeLoader):
    """YAML as the API server decodes it: a key given twice in one mapping is an error (kubectl's strict
    decoding refuses it), where PyYAML alone keeps the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d]  # noqa: S506 - a SafeLoader


@functools.cache
def _kustomize(folder: str) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(f"kubectl is not installed: `kubectl kustomize {folder}` cannot be rendered here")
    r = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def kustomize(folder: str = "") -> list[dict[str, Any]]:
    """The objects `kubectl apply -k deploy/kubernetes[/FOLDER]` sends (FOLDER: burnin, burnin-cordon)."""
    return load_all(_kustomize(str(K8S / folder) if folder else str(K8S)))


def kustomize_with(tmp: Path, *components: str) -> list[dict[str, Any]]:
    """The base with components of deploy/kubernetes/components (names), through an overlay in tmp, as a fleet's
    overlay takes them in."""
    (tmp / "deploy").symlink_to(ROOT / "deploy")
    (tmp / "overlay").mkdir()
    (tmp / "overlay" / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["../deploy/kubernetes"],
                "components": [f"../deploy/kubernetes/components/{c}" for c in components],
            }
        )
    )
    return load_all(_kustomize(str(tmp / "overlay")))


def helm_render(values: dict[str, Any] | None = None, namespace: str = "fleettool") -> dict[str, str]:
    """`helm template fleettool deploy/helm/fleettool -n NAMESPACE` with these values: template path -> text."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is a dev dependency")
    with helm.Chart.load(str(CHART)) as chart:
        return dict(chart.render(values or {}, name="fleettool", namespace=namespace))


def helm_objects(values: dict[str, Any] | None = None, namespace: str = "fleettool") -> list[dict[str, Any]]:
    out = []
    for path, text in sorted(helm_render(values, namespace).items()):
        if path.endswith(".yaml"):
            out += load_all(text)
    return out


def helm_error(values: dict[str, Any]) -> str:
    """The one-line error Helm gives for these values (the test fails if they render)."""
    helm = pytest.importorskip("helm_python")
    with helm.Chart.load(str(CHART)) as chart:
        try:
            chart.render(values, name="fleettool", namespace="fleettool")
        except helm.HelmError as e:
            return str(e)
    raise AssertionError(f"values rendered without an error: {values}")


def one(objs: list[dict[str, Any]], kind: str, name_end: str = "") -> dict[str, Any]:
    found = [d for d in objs if d["kind"] == kind and d["metadata"]["name"].endswith(name_end)]
    assert len(found) == 1, (kind, name_end, [d["metadata"]["name"] for d in found])
    return found[0]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def _closed(schema: Any) -> Any:
    """A CRD's structural schema with unknown fields refused, as `kubectl apply` (strict field validation, the
    default since Kubernetes 1.27) refuses them."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd_validator(kind: str) -> Any:
    import jsonschema

    doc = json.loads((CRD_SCHEMAS / f"{CRD_KINDS[kind]}.v1.schema.json").read_text())
    return jsonschema.Draft7Validator(_closed(doc["openAPIV3Schema"]))


def api_refusals(obj: dict[str, Any]) -> list[str]:
    """Security-context combinations the API server's validation refuses, which the OpenAPI schema cannot
    express (ValidateSecurityContext in kubernetes pkg/apis/core/validation): allowPrivilegeEscalation false
    with privileged true, or with the capability spelled CAP_SYS_ADMIN."""
    out = []
    for c in containers(obj):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is False:
            if sc.get("privileged") is True:
                out.append(f"{c['name']}: allowPrivilegeEscalation false with privileged true")
            if "CAP_SYS_ADMIN" in ((sc.get("capabilities") or {}).get("add") or []):
                out.append(f"{c['name']}: allowPrivilegeEscalation false with capabilities.add CAP_SYS_ADMIN")
    return out


def validate(objs: list[dict[str, Any]]) -> int:
    """Every object against its schema (the Prometheus Operator's CRDs included) and the API server's
    security-context rules; the number validated."""
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.utils.latest_version()
    n = 0
    for d in objs:
        meta = d["metadata"]
        name = f"{d['kind']}/{meta.get('name') or meta.get('generateName')}"  # kubectl create: generateName
        if d["apiVersion"] == "monitoring.coreos.com/v1":
            errors = sorted(_crd_validator(d["kind"]).iter_errors(d), key=str)
            assert not errors, f"{name}: " + "; ".join(
                f"{list(e.absolute_path)}: {e.message}" for e in errors
            )
        else:
            kv.validate(d, version, strict=True)
        assert api_refusals(d) == [], (name, api_refusals(d))
        n += 1
    return n


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels; {} selects everything."""
    sel = selector or {}
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": not (key in labels and labels[key] in values),
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def ingress_admits(
    policies: list[dict[str, Any]],
    pod: dict[str, Any],
    source: tuple[str, dict[str, str], dict[str, str]],
    port: int,
) -> bool:
    """Whether NetworkPolicies (the API's semantics) admit TCP to `port` of the pod a workload makes, from a pod
    in another place: source = (its namespace's name, that namespace's labels, the pod's labels). A pod no policy
    selects is not isolated; one that is admits what some rule of a selecting policy admits. A peer with a
    namespaceSelector matches pods of the namespaces it selects, one without it pods of the policy's namespace;
    ipBlocks match no pod here (they name addresses)."""
    ns = pod["metadata"]["namespace"]
    tpl = pod["spec"]["template"]
    named = {
        p["name"]: p["containerPort"] for c in containers(pod) for p in c.get("ports", []) if "name" in p
    }
    src_ns, src_ns_labels, src_labels = source
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == ns
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and selects(p["spec"]["podSelector"], tpl["metadata"]["labels"])
    ]
    if not mine:
        return True

    def peer_ok(peer: dict[str, Any], policy_ns: str) -> bool:
        if "ipBlock" in peer:
            return False
        if "namespaceSelector" in peer:
            in_ns = selects(peer["namespaceSelector"], src_ns_labels)
        else:
            in_ns = src_ns == policy_ns
        return in_ns and ("podSelector" not in peer or selects(peer["podSelector"], src_labels))

    def port_ok(p: dict[str, Any]) -> bool:
        want = p.get("port")
        return p.get("protocol", "TCP") == "TCP" and (
            want is None or want == port or named.get(str(want)) == port
        )

    for policy in mine:
        for rule in policy["spec"].get("ingress") or []:
            peers, ports = rule.get("from") or [], rule.get("ports") or []
            if (not peers or any(peer_ok(x, ns) for x in peers)) and (not ports or any(map(port_ok, ports))):
                return True
    return False
