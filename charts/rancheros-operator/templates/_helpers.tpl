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

{{/*
The syncer pods' pull secrets, comma separated: operator.syncerImagePullSecrets, or when it
is null the names of imagePullSecrets (the syncer pods run the operator's image too).
*/}}
{{- define "rancheros-operator.syncerImagePullSecrets" -}}
{{- $names := .Values.operator.syncerImagePullSecrets }}
{{- if kindIs "invalid" $names }}
{{- $names = list }}
{{- range .Values.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}
{{- join "," (uniq $names) }}
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

{{/* Rules on the operator's own resources, in a watched namespace or cluster-wide (files/rbac.yaml). */}}
{{- define "rancheros-operator.rules" -}}
{{- (.Files.Get "files/rbac.yaml" | fromYaml).rules | toYaml }}
{{- end }}

{{/* Rules on the leader Lease, in the release namespace (files/rbac.yaml). */}}
{{- define "rancheros-operator.leaseRules" -}}
{{- (.Files.Get "files/rbac.yaml" | fromYaml).leaseRules | toYaml | replace "LEASE_NAME" (include "rancheros-operator.leaseName" .) }}
{{- end }}

{{/* Reading the operator's own two CRDs, by name, cluster-wide (files/rbac.yaml). */}}
{{- define "rancheros-operator.crdRules" -}}
{{- (.Files.Get "files/rbac.yaml" | fromYaml).crdRules | toYaml }}
{{- end }}

{{/* Watching what could refuse a version write, cluster-wide (files/rbac.yaml). */}}
{{- define "rancheros-operator.admissionRules" -}}
{{- (.Files.Get "files/rbac.yaml" | fromYaml).admissionRules | toYaml }}
{{- end }}

{{/* Asking who may read /metrics: TokenReview and SubjectAccessReview (files/rbac.yaml). */}}
{{- define "rancheros-operator.reviewRules" -}}
{{- (.Files.Get "files/rbac.yaml" | fromYaml).reviewRules | toYaml }}
{{- end }}

{{/*
topologySpreadConstraints, each without a labelSelector given the operator pods' selector
labels (a constraint selects the pods it spreads; without one it counts nothing).
*/}}
{{- define "rancheros-operator.topologySpreadConstraints" -}}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "rancheros-operator.selectorLabels" $ | fromYaml)) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The Secret holding the webhook's bearer token. */}}
{{- define "rancheros-operator.webhookSecret" -}}
{{- .Values.webhook.existingSecret | default (printf "%s-webhook" (include "rancheros-operator.fullname" .)) -}}
{{- end }}
