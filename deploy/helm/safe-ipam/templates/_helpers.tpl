{{/* The image of safe-ipam's containers. */}}
{{- define "safe-ipam.image" -}}
image: {{ .Values.image.repository }}:{{ .Values.image.tag }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/* root, as the owner of the host's CNI dirs, with no capability at all. */}}
{{- define "safe-ipam.leastPrivilege" -}}
securityContext:
  runAsUser: 0
  runAsNonRoot: false
  privileged: false
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* Everywhere calico-node runs: its node selector and tolerations, and the
pod settings every safe-ipam DaemonSet shares. */}}
{{- define "safe-ipam.podSpec" -}}
nodeSelector:
  kubernetes.io/os: linux
tolerations:
  - effect: NoSchedule
    operator: Exists
  - key: CriticalAddonsOnly
    operator: Exists
  - effect: NoExecute
    operator: Exists
priorityClassName: system-node-critical
hostNetwork: true
automountServiceAccountToken: false
terminationGracePeriodSeconds: 5
securityContext:
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* The node settings install keeps for the plugin. */}}
{{- define "safe-ipam.nodeSettings" -}}
{{- with .Values.store }}
- --store={{ . }}
{{- end }}
{{- with .Values.delegateHandles }}
- --delegate-handles={{ . }}
{{- end }}
{{- with .Values.logFile }}
- --log-file={{ . }}
{{- end }}
{{- end }}

{{/* The conf dir is written only in the conflist modes. */}}
{{- define "safe-ipam.confDirReadOnly" -}}
{{ eq .Values.mode "takeover" }}
{{- end }}

{{/* The port of a host:port address. */}}
{{- define "safe-ipam.port" -}}
{{ last (splitList ":" .) }}
{{- end }}

{{/* The host paths every DaemonSet of safe-ipam mounts. */}}
{{- define "safe-ipam.hostVolumes" -}}
- name: cni-bin-dir
  hostPath:
    path: {{ .Values.cniBinDir }}
    type: Directory
- name: cni-net-dir
  hostPath:
    path: {{ .Values.cniConfDir }}
    type: Directory
- name: safe-ipam-state
  hostPath:
    path: /var/lib/cni/safe-ipam
    type: DirectoryOrCreate
- name: var-lib-calico
  hostPath:
    path: /var/lib/calico
    type: DirectoryOrCreate
- name: calico-ipam-lock
  hostPath:
    path: /var/run/calico/ipam.lock
    type: FileOrCreate
{{- end }}
