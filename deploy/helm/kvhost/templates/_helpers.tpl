{{/* Names and labels shared by every template. */}}

{{- define "kvhost.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kvhost.eppName" -}}
{{- printf "%s-epp" (include "kvhost.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvhost.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvhost
{{- end -}}

{{/* The model servers: the Deployment's, the PDB's and the InferencePool's selector. */}}
{{- define "kvhost.selectorLabels" -}}
app.kubernetes.io/name: kvhost
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvhost.eppSelectorLabels" -}}
app.kubernetes.io/name: kvhost-epp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvhost.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret holding the bearer keys, if any. */}}
{{- define "kvhost.keysSecret" -}}
{{- if .Values.keys.existingSecret -}}
{{- .Values.keys.existingSecret -}}
{{- else if .Values.keys.create -}}
{{- printf "%s-keys" (include "kvhost.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the plugins and their allow-list, if any. */}}
{{- define "kvhost.pluginsConfigMap" -}}
{{- if .Values.plugins.enabled -}}
{{- .Values.plugins.existingConfigMap | default (printf "%s-plugins" (include "kvhost.fullname" .)) -}}
{{- end -}}
{{- end -}}

{{- define "kvhost.gracePeriod" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add (int .Values.preStopSleepSeconds) (int .Values.shutdownTimeoutSeconds) 15 -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* The Secret key of each key file ("" when there is none). */}}
{{- define "kvhost.apiKeysKey" -}}
{{- if .Values.keys.existingSecret -}}{{ .Values.keys.apiKeysKey }}{{- else if and .Values.keys.create .Values.keys.apiKeys -}}api-keys{{- end -}}
{{- end -}}
{{- define "kvhost.adminKeyKey" -}}
{{- if .Values.keys.existingSecret -}}{{ .Values.keys.adminKeyKey }}{{- else if and .Values.keys.create .Values.keys.adminKey -}}admin-key{{- end -}}
{{- end -}}
