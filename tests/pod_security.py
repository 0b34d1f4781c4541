"""The Pod Security Standards, control by control, to check pod specs offline (no API server here).

Written from the document itself, https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the
version whose Baseline has "Host Probes / Lifecycle Hooks (v1.34+)"; kubernetes/website
content/en/docs/concepts/security/pod-security-standards.md). Each control below names the document's control and
checks the document's "Restricted Fields" against its "Allowed Values", for containers, initContainers and
ephemeralContainers alike ("if any of the listed containers fails to meet the requirements, the entire pod will
fail"). Restricted is everything in Baseline plus its own controls; Privilege Escalation, Seccomp and Capabilities
of Restricted do not apply to a pod with `spec.os.name: windows` (the document's "OS-specific policy controls").

A check returns Violations (control, field, value) rather than a bool so that a test can say what broke, and can
pin the exact set a deployment knowingly needs (tests/test_pod_security.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")

# Baseline, Capabilities: the only capabilities a container may add.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Baseline, SELinux: allowed seLinuxOptions.type values ("" and undefined too).
SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# Baseline, Sysctls: the "safe" subset (as of Kubernetes 1.29; the newest are marked "since" in the document).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# Restricted, Volume Types: every volume sets one of these.
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class Violation:
    control: str  # the document's name of the control
    field: str  # where, e.g. spec.containers[agent].securityContext.privileged
    value: object  # what was found

    def __str__(self) -> str:
        return f"{self.control}: {self.field}={self.value!r}"


def pod_template(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(metadata, spec) of the pod an object makes (a Pod, or a workload's template), or None for other kinds."""
    kind = obj.get("kind")
    if kind == "Pod":
        return obj.get("metadata") or {}, obj.get("spec") or {}
    if kind == "CronJob":
        tpl = obj["spec"]["jobTemplate"]["spec"]["template"]
    elif kind in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"):
        tpl = obj["spec"]["template"]
    else:
        return None
    return tpl.get("metadata") or {}, tpl.get("spec") or {}


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in CONTAINER_LISTS:
        for c in spec.get(key) or []:
            yield f"spec.{key}[{c.get('name', '?')}]", c


def _sc(d: dict[str, Any]) -> dict[str, Any]:
    return d.get("securityContext") or {}


def _linux(spec: dict[str, Any]) -> bool:
    return ((spec.get("os") or {}).get("name")) != "windows"


def baseline(meta: dict[str, Any], spec: dict[str, Any]) -> list[Violation]:
    out: list[Violation] = []
    psc = _sc(spec)

    # HostProcess
    if (psc.get("windowsOptions") or {}).get("hostProcess") not in (None, False):
        out.append(Violation("HostProcess", "spec.securityContext.windowsOptions.hostProcess", True))
    for where, c in _containers(spec):
        v = (_sc(c).get("windowsOptions") or {}).get("hostProcess")
        if v not in (None, False):
            out.append(Violation("HostProcess", f"{where}.securityContext.windowsOptions.hostProcess", v))

    # Host Namespaces
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(f) not in (None, False):
            out.append(Violation("Host Namespaces", f"spec.{f}", spec[f]))

    for where, c in _containers(spec):
        sc = _sc(c)
        # Privileged Containers
        if sc.get("privileged") not in (None, False):
            out.append(
                Violation("Privileged Containers", f"{where}.securityContext.privileged", sc["privileged"])
            )
        # Capabilities
        for cap in (sc.get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                out.append(Violation("Capabilities", f"{where}.securityContext.capabilities.add", cap))
        # Host Ports
        for p in c.get("ports") or []:
            if p.get("hostPort") not in (None, 0):
                out.append(
                    Violation("Host Ports", f"{where}.ports[{p.get('name', '?')}].hostPort", p["hostPort"])
                )
        # Host Probes / Lifecycle Hooks (v1.34+): the document lists containers and initContainers
        if not where.startswith("spec.ephemeralContainers"):
            hooks = [(f"{n}", c.get(n) or {}) for n in ("livenessProbe", "readinessProbe", "startupProbe")]
            hooks += [
                (f"lifecycle.{n}", (c.get("lifecycle") or {}).get(n) or {}) for n in ("postStart", "preStop")
            ]
            for name, h in hooks:
                for handler in ("httpGet", "tcpSocket"):
                    host = (h.get(handler) or {}).get("host")
                    if host not in (None, ""):
                        out.append(
                            Violation("Host Probes / Lifecycle Hooks", f"{where}.{name}.{handler}.host", host)
                        )
        # /proc Mount Type
        if sc.get("procMount") not in (None, "Default"):
            out.append(Violation("/proc Mount Type", f"{where}.securityContext.procMount", sc["procMount"]))

    # HostPath Volumes
    for v in spec.get("volumes") or []:
        if v.get("hostPath") is not None:
            out.append(
                Violation("HostPath Volumes", f"spec.volumes[{v.get('name', '?')}].hostPath", v["hostPath"])
            )

    # AppArmor: the securityContext field and the older annotation
    scopes = [("spec", psc)] + [(w, _sc(c)) for w, c in _containers(spec)]
    for where, sc in scopes:
        t = (sc.get("appArmorProfile") or {}).get("type")
        if t is not None and t not in APPARMOR_ALLOWED:
            out.append(Violation("AppArmor", f"{where}.securityContext.appArmorProfile.type", t))
    for k, v in (meta.get("annotations") or {}).items():
        if k.startswith(APPARMOR_ANNOTATION) and not (
            v == "runtime/default" or str(v).startswith("localhost/")
        ):
            out.append(Violation("AppArmor", f"metadata.annotations[{k}]", v))

    # SELinux: type from a short list; user and role never set
    for where, sc in scopes:
        se = sc.get("seLinuxOptions") or {}
        if se.get("type") not in (None, "") and se["type"] not in SELINUX_TYPES:
            out.append(Violation("SELinux", f"{where}.securityContext.seLinuxOptions.type", se["type"]))
        for f in ("user", "role"):
            if se.get(f) not in (None, ""):
                out.append(Violation("SELinux", f"{where}.securityContext.seLinuxOptions.{f}", se[f]))

    # Seccomp: never explicitly Unconfined
    for where, sc in scopes:
        t = (sc.get("seccompProfile") or {}).get("type")
        if t is not None and t not in SECCOMP_ALLOWED:
            out.append(Violation("Seccomp", f"{where}.securityContext.seccompProfile.type", t))

    # Sysctls
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(Violation("Sysctls", "spec.securityContext.sysctls[*].name", s.get("name")))
    return out


def restricted(meta: dict[str, Any], spec: dict[str, Any]) -> list[Violation]:
    out = baseline(meta, spec)
    psc = _sc(spec)
    linux = _linux(spec)

    # Volume Types
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name" and v[k] is not None]
        if not any(k in RESTRICTED_VOLUME_TYPES for k in kinds):
            out.append(Violation("Volume Types", f"spec.volumes[{v.get('name', '?')}]", kinds))

    # Running as Non-root: the pod says true, or every container does; an explicit false anywhere fails
    pod_nonroot = psc.get("runAsNonRoot")
    if pod_nonroot is not None and pod_nonroot is not True:
        out.append(Violation("Running as Non-root", "spec.securityContext.runAsNonRoot", pod_nonroot))
    # Running as Non-root user: runAsUser never 0
    if psc.get("runAsUser") == 0:
        out.append(Violation("Running as Non-root user", "spec.securityContext.runAsUser", 0))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")

    for where, c in _containers(spec):
        sc = _sc(c)
        nonroot = sc.get("runAsNonRoot")
        if (nonroot is not None and nonroot is not True) or (nonroot is None and pod_nonroot is not True):
            out.append(Violation("Running as Non-root", f"{where}.securityContext.runAsNonRoot", nonroot))
        if sc.get("runAsUser") == 0:
            out.append(Violation("Running as Non-root user", f"{where}.securityContext.runAsUser", 0))
        if not linux:
            continue
        # Privilege Escalation
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(
                Violation(
                    "Privilege Escalation",
                    f"{where}.securityContext.allowPrivilegeEscalation",
                    sc.get("allowPrivilegeEscalation"),
                )
            )
        # Seccomp: explicitly RuntimeDefault or Localhost, on the container or inherited from the pod
        t = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if t not in SECCOMP_ALLOWED:
            out.append(Violation("Seccomp", f"{where}.securityContext.seccompProfile.type", t))
        # Capabilities: drop ALL; add back NET_BIND_SERVICE at most
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(
                Violation("Capabilities", f"{where}.securityContext.capabilities.drop", caps.get("drop"))
            )
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                out.append(Violation("Capabilities", f"{where}.securityContext.capabilities.add", cap))
    return out


def violations(obj: dict[str, Any], level: str) -> list[Violation]:
    """What keeps an object's pods out of a Pod Security level ([] = admitted; [] for objects that make no pod)."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r} (one of {', '.join(LEVELS)})")
    pod = pod_template(obj)
    if pod is None or level == "privileged":
        return []
    return (baseline if level == "baseline" else restricted)(*pod)


def least_level(obj: dict[str, Any]) -> str:
    """The strictest level the object's pods meet."""
    for level in reversed(LEVELS):
        if not violations(obj, level):
            return level
    return "privileged"


def namespace_level(ns: dict[str, Any]) -> str:
    """The level a Namespace enforces (pod-security.kubernetes.io/enforce; unlabelled is privileged, the
    admission controller's default)."""
    level = ((ns.get("metadata") or {}).get("labels") or {}).get(
        "pod-security.kubernetes.io/enforce", "privileged"
    )
    if level not in LEVELS:
        raise ValueError(f"namespace {ns['metadata']['name']}: unknown Pod Security level {level!r}")
    return str(level)
