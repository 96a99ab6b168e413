{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "p4fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name used as the prefix of every object. A release called "p4fleet" (the
documented one) yields plain "p4fleet", matching config/.
*/}}
{{- define "p4fleet.fullname" -}}
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

{{/*
Chart label value: name-version.
*/}}
{{- define "p4fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels on every object.
*/}}
{{- define "p4fleet.labels" -}}
helm.sh/chart: {{ include "p4fleet.chart" . }}
{{ include "p4fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: p4fleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels; immutable on a Deployment, so keep them minimal and stable.
*/}}
{{- define "p4fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "p4fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "p4fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "p4fleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Container image reference: digest wins over tag; tag defaults to appVersion.
*/}}
{{- define "p4fleet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
RBAC rules for the namespaced kinds, ConfigMaps and Events: in the
ClusterRole of a cluster-wide install, in a Role of the watched namespace
with operator.watchNamespace. Verbs are the calls the operator makes
(docs/install.md, "RBAC"): gets go through reads.rs, lists and watches are
the controllers', patches are finalizers, slot claims and server-side
applied status.
*/}}
{{- define "p4fleet.namespacedRules" -}}
- apiGroups: ["p4fleet.dev"]
  resources: ["p4programs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["p4fleet.dev"]
  resources: ["virtualswitches"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["p4fleet.dev"]
  resources: ["tableentrysets"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["p4fleet.dev"]
  resources: ["asyncexternpolicies"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["p4fleet.dev"]
  resources: ["p4programs/status", "virtualswitches/status", "tableentrysets/status", "asyncexternpolicies/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
# AsyncExternPolicy's T4P4S launch options (<policy>-t4p4s), the
# TableEntrySets' ownership records on BFRT Switches (p4fleet-owned.<set>,
# docs/bfrt.md) and their digest sinks (<set>-digest-<digest>,
# docs/entities/digests.md): server-side apply creates and updates them
# (create is checked when the apply creates one); a policy without a
# rendering, a deleted set's record and sinks are deleted. A P4Program's
# revision snapshots (<program>-<digest>-<n>, immutable) are created, and
# deleted past its revisionHistoryLimit (docs/rollouts.md).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "patch", "delete"]
# P4Programs' revisions (docs/rollouts.md): watched (only p4fleet's, by
# label), read by VirtualSwitches, created per content, renumbered when
# a content comes back, deleted past the history limit.
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Namespaces whose Secrets the operator may list and watch (switch TLS):
rbac.tlsSecretNamespaces, default the release namespace.
*/}}
{{- define "p4fleet.tlsSecretNamespaces" -}}
{{- if .Values.rbac.tlsSecretNamespaces }}
{{- toJson .Values.rbac.tlsSecretNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}
