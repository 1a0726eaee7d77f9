{{/* The metrics listen address of the ConfigMap (podIP: the env entry of the DaemonSet overrides it). */}}
{{- define "pqwatch.metricsAddr" -}}
{{- if eq .Values.metrics.bind "localhost" -}}
127.0.0.1:{{ .Values.metrics.port }}
{{- else if or (eq .Values.metrics.bind "all") (eq .Values.metrics.bind "podIP") -}}
:{{ .Values.metrics.port }}
{{- else -}}
{{- fail (printf "metrics.bind must be all, podIP or localhost, not %q" .Values.metrics.bind) -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "pqwatch.labels" -}}
app.kubernetes.io/name: pqwatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: pqwatch
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* A monitor cannot scrape an agent that listens on 127.0.0.1. */}}
{{- define "pqwatch.checkMonitors" -}}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled -}}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: choose one (both would scrape every target twice)" -}}
{{- end -}}
{{- if and (eq .Values.metrics.bind "localhost") (or .Values.serviceMonitor.enabled .Values.podMonitor.enabled) -}}
{{- fail "metrics.bind=localhost: a ServiceMonitor or PodMonitor scrapes the pod IP and cannot reach 127.0.0.1" -}}
{{- end -}}
{{- end -}}

{{/* Accept events need process tracking. */}}
{{- define "pqwatch.checkAcceptEvents" -}}
{{- if and .Values.acceptEvents (not .Values.processTracking) -}}
{{- fail "acceptEvents needs processTracking: the accept events attribute handshakes to the generations process tracking finds" -}}
{{- end -}}
{{- end -}}
