{{- define "slo-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "slo-operator.serviceAccountName" -}}
{{- default (include "slo-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "slo-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "slo-operator.labels" -}}
app.kubernetes.io/name: slo-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "slo-operator.peeringName" -}}
{{- default (include "slo-operator.fullname" .) .Values.peering.name -}}
{{- end -}}

{{- define "slo-operator.selectorLabels" -}}
app.kubernetes.io/name: slo-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The activator (scale to zero): its own name and selector, so that neither the
operator's Deployment, PDB nor metrics Service selects its pods. */}}
{{- define "slo-operator.activatorName" -}}
{{- printf "%s-activator" (include "slo-operator.fullname" . | trunc 53 | trimSuffix "-") -}}
{{- end -}}

{{- define "slo-operator.activatorSelectorLabels" -}}
app.kubernetes.io/name: slo-operator-activator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "slo-operator.activatorLabels" -}}
{{ include "slo-operator.activatorSelectorLabels" . }}
app.kubernetes.io/component: activator
app.kubernetes.io/part-of: slo-operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "slo-operator.activatorServiceAccountName" -}}
{{- default (include "slo-operator.activatorName" .) .Values.activator.serviceAccount.name -}}
{{- end -}}
