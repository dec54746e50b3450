{{/*
The chart's name, and the name of the release's objects (<release>, or
<release>-informerhub when the release's name does not say informerhub).
*/}}
{{- define "informerhub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "informerhub.fullname" -}}
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

{{/* The labels every object carries. */}}
{{- define "informerhub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "informerhub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: informerhub
{{- end }}

{{/* The labels that select the hub's pods. */}}
{{- define "informerhub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "informerhub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "informerhub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "informerhub.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the service account the hub runs as, when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "informerhub.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "informerhub.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{- define "informerhub.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
A flag's value as the hub reads it: numbers without an exponent (values
files hold every number as a float), lists joined by commas.
*/}}
{{- define "informerhub.flagValue" -}}
{{- if kindIs "slice" . }}
{{- join "," . }}
{{- else if and (kindIs "float64" .) (eq . (float64 (int64 .))) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* Paths of what the chart mounts. */}}
{{- define "informerhub.tlsDir" -}}/etc/informerhub/tls{{- end }}
{{- define "informerhub.clientCADir" -}}/etc/informerhub/client-ca{{- end }}
{{- define "informerhub.encryptionDir" -}}/etc/informerhub/encryption{{- end }}

{{/*
The hub's arguments: those the chart's own values decide (ports, TLS, the
history on disk), then every config key that is set, as --<kebab-case
key>=<value>. test/chart checks that each flag an operator sets is
reachable here.
*/}}
{{- define "informerhub.args" -}}
- {{ printf "--listen=:%v" (include "informerhub.flagValue" .Values.ports.grpc) | quote }}
- {{ printf "--metrics-listen=:%v" (include "informerhub.flagValue" .Values.ports.metrics) | quote }}
{{- if .Values.tls.enabled }}
- {{ printf "--tls-cert=%s/tls.crt" (include "informerhub.tlsDir" .) | quote }}
- {{ printf "--tls-key=%s/tls.key" (include "informerhub.tlsDir" .) | quote }}
{{- end }}
{{- if eq .Values.config.auth "mtls" }}
- {{ printf "--client-ca=%s/%s" (include "informerhub.clientCADir" .) .Values.tls.clientCA.key | quote }}
{{- end }}
{{- with .Values.durableHistory }}
{{- if .enabled }}
- {{ printf "--history-dir=%s/history" .mountPath | quote }}
- {{ printf "--history-retention=%s" .retention | quote }}
- {{ printf "--history-disk-bytes=%s" (include "informerhub.flagValue" .diskBytes) | quote }}
{{- if not (kindIs "invalid" .maxUnwrittenBytes) }}
- {{ printf "--history-max-unwritten-bytes=%s" (include "informerhub.flagValue" .maxUnwrittenBytes) | quote }}
{{- end }}
{{- if .encryptionConfig.secretName }}
- {{ printf "--history-encryption-config=%s/%s" (include "informerhub.encryptionDir" $) .encryptionConfig.key | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{- if and (not (kindIs "invalid" $value)) (or (ne $key "tokenAudience") (eq $.Values.config.auth "kubernetes")) }}
- {{ printf "--%s=%s" (kebabcase $key) (include "informerhub.flagValue" $value) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Whether the cluster serves a kind of the Prometheus Operator
(monitoring.coreos.com/v1): "true" or "". helm install and upgrade ask the
cluster, whose discovery lists both the group and version and each kind
(monitoring.coreos.com/v1/ServiceMonitor); helm template, helm lint and
helm install --dry-run know only what --api-versions says, in either form:
the kind (.../v1/ServiceMonitor, .../v1/PodMonitor, .../v1/PrometheusRule),
or, as most charts check and GitOps tools pass, the group and version
alone, which then stands for all three. Where some kind of the group is
listed, the kinds decide: a cluster with only some of the operator's CRDs
gets only those objects. An enabled monitor or rule whose kind is not
served is left out, and NOTES.txt says so, instead of failing the whole
release with "no matches for kind".
*/}}
{{- define "informerhub.serves" -}}
{{- $groupVersion := "monitoring.coreos.com/v1" }}
{{- $apis := .ctx.Capabilities.APIVersions }}
{{- if $apis.Has (printf "%s/%s" $groupVersion .kind) }}true
{{- else if $apis.Has $groupVersion }}
{{- $kindsListed := false }}
{{- range $apis }}{{ if hasPrefix (printf "%s/" $groupVersion) . }}{{ $kindsListed = true }}{{ end }}{{ end }}
{{- if not $kindsListed }}true{{ end }}
{{- end }}
{{- end }}

{{/*
What cannot work, said before anything is applied.
*/}}
{{- define "informerhub.validate" -}}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: choose one, or Prometheus scrapes every hub twice" }}
{{- end }}
{{- if and (eq .Values.config.auth "mtls") (not .Values.tls.clientCA.secretName) }}
{{- fail "config.auth: mtls needs tls.clientCA.secretName, the Secret holding the CAs that sign client certificates" }}
{{- end }}
{{- if and (eq .Values.config.auth "mtls") (not .Values.tls.enabled) }}
{{- fail "config.auth: mtls needs tls.enabled" }}
{{- end }}
{{- if and (not .Values.tls.enabled) (not .Values.config.insecureAllowRemotePlaintext) }}
{{- fail "tls.enabled: false sends bearer tokens in the clear: set config.insecureAllowRemotePlaintext: true to mean it" }}
{{- end }}
{{- if and (eq .Values.config.auth "none") (not .Values.config.insecureAllowRemoteUnauthenticated) }}
{{- fail "config.auth: none lets anyone who reaches the hub read what it can: set config.insecureAllowRemoteUnauthenticated: true to mean it" }}
{{- end }}
{{- end }}

{{/*
The pod template, one for the Deployment and the StatefulSet; its
container is deploy/base/deployment.yaml's (test/chart checks it).
*/}}
{{- define "informerhub.podTemplate" -}}
metadata:
  labels:
    {{- include "informerhub.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- if .Values.scrapeAnnotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ .Values.ports.metrics | quote }}
    prometheus.io/path: /metrics
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "informerhub.serviceAccountName" . }}
  # The hub talks to the API server as its service account.
  automountServiceAccountToken: true
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  topologySpreadConstraints:
  {{- if .Values.topologySpreadConstraints }}
    {{- toYaml .Values.topologySpreadConstraints | nindent 4 }}
  {{- else }}
    {{- $revision := ternary "controller-revision-hash" "pod-template-hash" .Values.durableHistory.enabled }}
    # One hub per node, so a node failure takes down at most one; on a
    # single node all still schedule.
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
      nodeTaintsPolicy: Honor
      labelSelector:
        matchLabels:
          {{- include "informerhub.selectorLabels" . | nindent 10 }}
      matchLabelKeys: [{{ $revision }}]
    # Across zones where the cluster has them.
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "informerhub.selectorLabels" . | nindent 10 }}
      matchLabelKeys: [{{ $revision }}]
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: informerhub
      image: {{ include "informerhub.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        {{- include "informerhub.args" . | nindent 8 }}
      env:
        # The Go runtime collects garbage harder as the heap nears the
        # memory limit, instead of being OOM-killed.
        - name: GOMEMLIMIT
          valueFrom:
            resourceFieldRef:
              resource: limits.memory
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: grpc
          containerPort: {{ .Values.ports.grpc }}
          protocol: TCP
        - name: metrics
          containerPort: {{ .Values.ports.metrics }}
          protocol: TCP
      readinessProbe:
        {{- toYaml .Values.readinessProbe | nindent 8 }}
      livenessProbe:
        {{- toYaml .Values.livenessProbe | nindent 8 }}
      {{- if .Values.preStopSleepSeconds }}
      lifecycle:
        # Out of the Services' endpoints first; then SIGTERM ends the
        # streams a few at a time over --shutdown-drain.
        preStop:
          sleep:
            seconds: {{ .Values.preStopSleepSeconds }}
      {{- end }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- if .Values.tls.enabled }}
        - name: tls
          mountPath: {{ include "informerhub.tlsDir" . }}
          readOnly: true
        {{- end }}
        {{- if eq .Values.config.auth "mtls" }}
        - name: client-ca
          mountPath: {{ include "informerhub.clientCADir" . }}
          readOnly: true
        {{- end }}
        {{- if .Values.durableHistory.enabled }}
        - name: history
          mountPath: {{ .Values.durableHistory.mountPath }}
        {{- if .Values.durableHistory.encryptionConfig.secretName }}
        - name: history-encryption
          mountPath: {{ include "informerhub.encryptionDir" . }}
          readOnly: true
        {{- end }}
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- if .Values.tls.enabled }}
    # Reloaded by the hub when it changes (cert-manager renewals).
    - name: tls
      secret:
        secretName: {{ include "informerhub.tlsSecretName" . }}
        defaultMode: 0440
    {{- end }}
    {{- if eq .Values.config.auth "mtls" }}
    - name: client-ca
      secret:
        secretName: {{ .Values.tls.clientCA.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- if and .Values.durableHistory.enabled .Values.durableHistory.encryptionConfig.secretName }}
    - name: history-encryption
      secret:
        secretName: {{ .Values.durableHistory.encryptionConfig.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
