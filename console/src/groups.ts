// The sidebar's sections, as Headlamp and the Kubernetes dashboard group
// resource types: by what they are for, not by API group.

/** The sections, in the sidebar's order. */
export const SECTIONS = ["Workloads", "Network", "Storage", "Config", "Access control", "Cluster", "Custom resources", "Other"] as const;
export type Section = (typeof SECTIONS)[number];

const BY_RESOURCE: Readonly<Record<string, Section>> = {
  pods: "Workloads",
  "deployments.apps": "Workloads",
  "replicasets.apps": "Workloads",
  "statefulsets.apps": "Workloads",
  "daemonsets.apps": "Workloads",
  "jobs.batch": "Workloads",
  "cronjobs.batch": "Workloads",
  replicationcontrollers: "Workloads",
  services: "Network",
  endpoints: "Network",
  "endpointslices.discovery.k8s.io": "Network",
  "ingresses.networking.k8s.io": "Network",
  "ingressclasses.networking.k8s.io": "Network",
  "networkpolicies.networking.k8s.io": "Network",
  persistentvolumeclaims: "Storage",
  persistentvolumes: "Storage",
  "storageclasses.storage.k8s.io": "Storage",
  "volumeattachments.storage.k8s.io": "Storage",
  "csidrivers.storage.k8s.io": "Storage",
  "csinodes.storage.k8s.io": "Storage",
  configmaps: "Config",
  secrets: "Config",
  resourcequotas: "Config",
  limitranges: "Config",
  "horizontalpodautoscalers.autoscaling": "Config",
  "poddisruptionbudgets.policy": "Config",
  "priorityclasses.scheduling.k8s.io": "Config",
  "leases.coordination.k8s.io": "Config",
  "runtimeclasses.node.k8s.io": "Config",
  "mutatingwebhookconfigurations.admissionregistration.k8s.io": "Config",
  "validatingwebhookconfigurations.admissionregistration.k8s.io": "Config",
  serviceaccounts: "Access control",
  "roles.rbac.authorization.k8s.io": "Access control",
  "rolebindings.rbac.authorization.k8s.io": "Access control",
  "clusterroles.rbac.authorization.k8s.io": "Access control",
  "clusterrolebindings.rbac.authorization.k8s.io": "Access control",
  nodes: "Cluster",
  namespaces: "Cluster",
  events: "Cluster",
  "events.events.k8s.io": "Cluster",
  "customresourcedefinitions.apiextensions.k8s.io": "Cluster",
  "apiservices.apiregistration.k8s.io": "Cluster",
};

/** The section of a resource type; a type with printer columns, or of an unknown non-k8s.io group, is a custom resource. */
export function sectionOf(r: { readonly group: string; readonly resource: string; readonly printerColumns: readonly unknown[] }): Section {
  const known = BY_RESOURCE[r.group === "" ? r.resource : `${r.resource}.${r.group}`];
  if (known !== undefined) return known;
  if (r.printerColumns.length > 0) return "Custom resources";
  if (r.group === "" || r.group.endsWith(".k8s.io") || !r.group.includes(".")) return "Other";
  return "Custom resources";
}
