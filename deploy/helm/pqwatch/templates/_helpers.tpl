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


{{/* Kafka settings that cannot work. */}}
{{- define "pqwatch.checkKafka" -}}
{{- $t := .Values.kafka.tls -}}
{{- $s := .Values.kafka.sasl -}}
{{- if and $t.secretName (not $t.enabled) -}}
{{- fail "kafka.tls.secretName without kafka.tls.enabled" -}}
{{- end -}}
{{- if and $t.enabled $t.secretName (not (or $t.caKey $t.certKey)) -}}
{{- fail "kafka.tls.secretName: name caKey, or certKey and keyKey, of the Secret" -}}
{{- end -}}
{{- if ne (empty $t.certKey) (empty $t.keyKey) -}}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together" -}}
{{- end -}}
{{- if and $t.certKey (not $t.secretName) -}}
{{- fail "kafka.tls.certKey needs kafka.tls.secretName, the Secret that holds it" -}}
{{- end -}}
{{- if not (has $s.mechanism (list "" "plain" "scram-sha-256" "scram-sha-512")) -}}
{{- fail (printf "kafka.sasl.mechanism must be plain, scram-sha-256 or scram-sha-512, not %q" $s.mechanism) -}}
{{- end -}}
{{- if and $s.mechanism (not (and $s.username $s.passwordSecretName)) -}}
{{- fail "kafka.sasl.mechanism needs kafka.sasl.username and kafka.sasl.passwordSecretName (the password is read from that Secret, never from a value)" -}}
{{- end -}}
{{- if and (not $s.mechanism) (or $s.username $s.passwordSecretName) -}}
{{- fail "kafka.sasl.username and passwordSecretName need kafka.sasl.mechanism" -}}
{{- end -}}
{{- end -}}

{{/* A web config the probes and monitors can live with. */}}
{{- define "pqwatch.checkWebConfig" -}}
{{- $w := .Values.metrics.webConfig -}}
{{- if $w.enabled -}}
{{- if not $w.secretName -}}
{{- fail "metrics.webConfig.enabled needs metrics.webConfig.secretName, the Secret with web-config.yml" -}}
{{- end -}}
{{- if and $w.basicAuth (not $w.probeHTTPHeaders) -}}
{{- fail "metrics.webConfig.basicAuth: /healthz needs credentials too and the kubelet's probes cannot read a Secret; set metrics.webConfig.probeHTTPHeaders (an Authorization header of a user kept for the probes), or the probes fail with 401 and the pods restart forever" -}}
{{- end -}}
{{- if and (or .Values.serviceMonitor.enabled .Values.podMonitor.enabled) (or $w.tls $w.basicAuth) (not $w.scrapeSecretName) -}}
{{- fail "metrics.webConfig: the monitors need metrics.webConfig.scrapeSecretName (ca.crt, and username/password with basicAuth)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The monitors' scheme, TLS and basic auth for a metrics endpoint behind -web.config.file. */}}
{{- define "pqwatch.scrapeAuth" -}}
{{- $w := .Values.metrics.webConfig -}}
{{- if and $w.enabled $w.tls -}}
scheme: https
tlsConfig:
  ca:
    secret:
      name: {{ $w.scrapeSecretName }}
      key: ca.crt
  serverName: {{ $w.serverName }}
{{- end }}
{{- if and $w.enabled $w.basicAuth }}
basicAuth:
  username:
    name: {{ $w.scrapeSecretName }}
    key: username
  password:
    name: {{ $w.scrapeSecretName }}
    key: password
{{- end -}}
{{- end -}}
