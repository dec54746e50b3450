{{/*
informerhub-export (export.enabled): its names, labels, configuration
file and checks. Its pods carry a name label of their own
(<name>-export), so that the hub's Services, PodDisruptionBudget and
monitors, which select app.kubernetes.io/name <name>, never pick them.
*/}}
{{- define "informerhub.export.fullname" -}}
{{- printf "%s-export" (include "informerhub.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{- define "informerhub.export.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-export" (include "informerhub.name" . | trunc 56 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "informerhub.export.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "informerhub.export.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: informerhub
app.kubernetes.io/component: export
{{- end }}

{{- define "informerhub.export.serviceAccountName" -}}
{{- if .Values.export.serviceAccount.create }}
{{- default (include "informerhub.export.fullname" .) .Values.export.serviceAccount.name }}
{{- else }}
{{- required "export.serviceAccount.name: the service account the exporter runs as, when export.serviceAccount.create is false" .Values.export.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The hub's image unless export.image names another. */}}
{{- define "informerhub.export.image" -}}
{{- with .Values.export.image }}
{{- if or .repository .tag .digest }}
{{- $repository := default $.Values.image.repository .repository }}
{{- if .digest }}
{{- printf "%s@%s" $repository .digest }}
{{- else }}
{{- printf "%s:%s" $repository (default (default $.Chart.AppVersion $.Values.image.tag) .tag) }}
{{- end }}
{{- else }}
{{- include "informerhub.image" $ }}
{{- end }}
{{- end }}
{{- end }}

{{/* Paths of what the chart mounts in the exporter's pod. */}}
{{- define "informerhub.export.configDir" -}}/etc/informerhub-export/config{{- end }}
{{- define "informerhub.export.hubCADir" -}}/etc/informerhub-export/hub-ca{{- end }}
{{- define "informerhub.export.tokenDir" -}}/var/run/secrets/informerhub{{- end }}

{{- define "informerhub.export.hubCASecretName" -}}
{{- default (include "informerhub.tlsSecretName" .) .Values.export.hubCA.secretName }}
{{- end }}

{{/*
The configuration file: export.config, with hub filled in as the chart
serves the hub, and each cloudevents route's checkpoint defaulted to a
file of its name on the checkpoints volume.
*/}}
{{- define "informerhub.export.config" -}}
{{- $cfg := deepCopy .Values.export.config }}
{{- $hub := dict "addresses" (list (printf "%s.%s.svc:%s" (include "informerhub.fullname" .) .Release.Namespace (include "informerhub.flagValue" .Values.ports.grpc))) }}
{{- if .Values.tls.enabled }}
{{- $_ := set $hub "caFile" (printf "%s/%s" (include "informerhub.export.hubCADir" .) .Values.export.hubCA.key) }}
{{- else }}
{{- $_ := set $hub "insecure" true }}
{{- end }}
{{- if eq .Values.config.auth "kubernetes" }}
{{- $_ := set $hub "tokenFile" (printf "%s/token" (include "informerhub.export.tokenDir" .)) }}
{{- end }}
{{- $_ := set $cfg "hub" $hub }}
{{- if not $cfg.nats }}
{{- $_ := unset $cfg "nats" }}
{{- end }}
{{- range $cfg.routes }}
{{- if and .cloudevents (not .cloudevents.checkpoint) }}
{{- $_ := set .cloudevents "checkpoint" (printf "%s/%s" (clean $.Values.export.checkpoints.mountPath) .name) }}
{{- end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
What cannot work, said before anything is applied. The command checks the
rest of its file when it starts (export.LoadConfig).
*/}}
{{- define "informerhub.export.validate" -}}
{{- if eq .Values.config.auth "mtls" }}
{{- fail "export.enabled with config.auth: mtls: informerhub-export authenticates with a service account token, and has no client certificate" }}
{{- end }}
{{- if and (not .Values.tls.enabled) (eq .Values.config.auth "kubernetes") }}
{{- fail "export.enabled with tls.enabled: false: informerhub-export refuses to send its token to the hub in the clear" }}
{{- end }}
{{- if not .Values.export.config.cluster }}
{{- fail "export.config.cluster: required: it names the cluster in every change's id" }}
{{- end }}
{{- if not .Values.export.config.routes }}
{{- fail "export.config.routes: none: name at least one route (docs/export.md#running-it)" }}
{{- end }}
{{- $dir := clean .Values.export.checkpoints.mountPath }}
{{- range .Values.export.config.routes }}
{{- if and .jetstream (not ($.Values.export.config.nats | default dict).url) }}
{{- fail (printf "export.config.routes %s: a jetstream route needs export.config.nats.url, the NATS server" .name) }}
{{- end }}
{{- if .cloudevents }}
{{- if .cloudevents.checkpoint }}
{{- if ne (dir .cloudevents.checkpoint) $dir }}
{{- fail (printf "export.config.routes %s: cloudevents.checkpoint %s is not a file of export.checkpoints.mountPath (%s), the one writable volume: leave it out for %s/%s" .name .cloudevents.checkpoint $dir $dir .name) }}
{{- end }}
{{- else if not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9._-]*$" (toString .name)) }}
{{- fail (printf "export.config.routes %q: the chart names its checkpoint file after the route: set cloudevents.checkpoint, a file in %s" .name $dir) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
