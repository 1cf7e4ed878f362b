{{/* The chart's name, or nameOverride. */}}
{{- define "rancheros-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: object names are derived from it. */}}
{{- define "rancheros-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rancheros-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rancheros-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rancheros-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rancheros-operator.labels" -}}
helm.sh/chart: {{ include "rancheros-operator.chart" . }}
{{ include "rancheros-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: rancheros-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rancheros-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rancheros-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image the Deployment runs, and the operator's OPERATOR_IMAGE (the display container of
every syncer pod): one string, so the two can never differ.
*/}}
{{- define "rancheros-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{- define "rancheros-operator.leaseName" -}}
{{- default (include "rancheros-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The watched namespaces, de-duplicated, in the given order. */}}
{{- define "rancheros-operator.namespaces" -}}
{{- $seen := list }}
{{- range .Values.operator.namespaces }}
{{- if not (has . $seen) }}
{{- $seen = append $seen . }}
{{- end }}
{{- end }}
{{- join "," $seen }}
{{- end }}

{{/* Rules on the operator's own resources, in a watched namespace or cluster-wide. */}}
{{- define "rancheros-operator.rules" -}}
# Channels: the controller watches them; the status subresource is merge-patched.
- apiGroups: ["rancheros.cattle.io"]
  resources: ["managedosversionchannels"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["rancheros.cattle.io"]
  resources: ["managedosversionchannels/status"]
  verbs: ["patch"]
# Versions: watched (one cache shared by all channels), created/updated by server-side apply (a patch that may
# create), annotated by merge patch, deleted with a uid precondition; a sync refused
# half-way undoes its writes (update puts a changed version back, create restores a
# deleted one).
- apiGroups: ["rancheros.cattle.io"]
  resources: ["managedosversions"]
  verbs: ["list", "watch", "create", "patch", "update", "delete"]
# Syncer pods: watched (label rancheros.cattle.io/channel), read, created, deleted.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
# The runner's and display container's logs.
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# Events on channels (kube-runtime's Recorder: events.k8s.io/v1, create or patch a series).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
