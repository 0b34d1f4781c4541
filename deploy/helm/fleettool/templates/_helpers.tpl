{{/* Names and labels. */}}
{{- define "fleettool.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fleettool.labels" -}}
app.kubernetes.io/part-of: fleettool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include with (list $ "agent"). */}}
{{- define "fleettool.selector" -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{- define "fleettool.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The agent reads /dev/kmsg: a privileged container (the device cgroup), as uid 0 (CAP_SYSLOG). */}}
{{- define "fleettool.agentPrivileged" -}}
{{- if eq .Values.agent.kernelLog "kmsg" }}true{{ end -}}
{{- end -}}

{{/* The agent runs as uid 0: for /dev/kmsg (CAP_SYSLOG), or to write a root-owned hostPath. */}}
{{- define "fleettool.agentRoot" -}}
{{- if or (ne .Values.agent.kernelLog "off") (eq .Values.agent.db.persistence "hostPath") }}true{{ end -}}
{{- end -}}

{{/*
The least Pod Security level the release's pods meet (tests/test_helm_chart.py checks it against the pods):
privileged with /dev/kmsg, a hostPath (the database, an export volume, the host's /sys) or the bundled dcgm-exporter (SYS_ADMIN,
the kubelet's pod-resources hostPath); baseline when an export volume is of a type restricted does not list
(nfs, ...); else restricted.
*/}}
{{- define "fleettool.podSecurityLevel" -}}
{{- $vol := .Values.agent.export.volume | default dict -}}
{{- $restrictedTypes := list "configMap" "csi" "downwardAPI" "emptyDir" "ephemeral" "persistentVolumeClaim" "projected" "secret" -}}
{{- $level := "restricted" -}}
{{- range $k, $_ := $vol -}}
{{- if not (has $k $restrictedTypes) }}{{ $level = "baseline" }}{{ end -}}
{{- end -}}
{{- if or (include "fleettool.agentRoot" .) .Values.dcgmExporter.enabled (hasKey $vol "hostPath") .Values.agent.fabric.enabled -}}
{{- $level = "privileged" -}}
{{- end -}}
{{- $level -}}
{{- end -}}

{{- define "fleettool.dcgmLocalService" -}}
{{- printf "%s-dcgm-local" (include "fleettool.fullname" .) -}}
{{- end -}}

{{/* Where the agent scrapes its own node's dcgm-exporter. */}}
{{- define "fleettool.dcgmUrl" -}}
{{- $d := .Values.dcgmExporter -}}
{{- if $d.url -}}
{{- $d.url -}}
{{- else if $d.enabled -}}
{{- printf "http://%s:9400/metrics" (include "fleettool.dcgmLocalService" .) -}}
{{- else if $d.external.namespace -}}
{{- printf "http://%s.%s.svc:%d/metrics" (include "fleettool.dcgmLocalService" .) $d.external.namespace (int $d.external.port) -}}
{{- else -}}
off
{{- end -}}
{{- end -}}
