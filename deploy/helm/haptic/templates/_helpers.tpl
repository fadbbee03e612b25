{{/* Name of the chart's objects: the release name when it contains "haptic", else <release>-haptic. */}}
{{- define "haptic.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "haptic.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable for the life of a release. */}}
{{- define "haptic.selectorLabels" -}}
app.kubernetes.io/name: {{ include "haptic.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "haptic.labels" -}}
{{ include "haptic.selectorLabels" . }}
app.kubernetes.io/component: controller
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "haptic.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "haptic.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The controller image: <repository>:<tag>, tag <appVersion>-haproxy<haproxyVersion> by default. */}}
{{- define "haptic.image" -}}
{{- $supported := list "2.6" "3.0" -}}
{{- $v := toString .Values.haproxyVersion -}}
{{- if not (has $v $supported) -}}
{{- fail (printf "haproxyVersion %q is not built: use one of %s (Dockerfile --build-arg DEBIAN_SUITE: bookworm = 2.6, trixie = 3.0)" $v (join ", " $supported)) -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "%s-haproxy%s" .Chart.AppVersion $v) .Values.image.tag) -}}
{{- end -}}

{{/* HAPTIC_POD_SELECTOR: dataplane.podSelector as given. */}}
{{- define "haptic.podSelector" -}}
{{- required "dataplane.podSelector must be a label selector (e.g. app.kubernetes.io/name=haproxy)" .Values.dataplane.podSelector | toString | trim -}}
{{- end -}}

{{/* dataplane.podSelector as matchLabels (equality terms only: k=v or k==v, comma-separated). */}}
{{- define "haptic.podSelectorLabels" -}}
{{- $lines := list -}}
{{- range $term := splitList "," (include "haptic.podSelector" .) -}}
{{- $t := trim $term -}}
{{- $kv := splitList "=" (replace "==" "=" $t) -}}
{{- if or (ne (len $kv) 2) (contains "!" $t) (contains " " $t) (eq (index $kv 0) "") -}}
{{- fail (printf "networkPolicy needs dataplane.podSelector of equality terms (k=v,...): %q is not one" $t) -}}
{{- end -}}
{{- $lines = append $lines (printf "%s: %s" (index $kv 0) (index $kv 1 | quote)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{- define "haptic.leaseName" -}}
{{- default (printf "%s-leader" (include "haptic.fullname" .)) .Values.settings.leaseName -}}
{{- end -}}
