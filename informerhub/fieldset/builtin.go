package fieldset

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// The fields the kube-apiserver (v1.37) supports in field selectors of its
// built-in resource types, and how it computes each from an object.
//
// Which fields a type accepts: the field label conversion functions its
// API group registers per version (AddFieldLabelConversionFunc in
// k8s.io/kubernetes pkg/apis/<group>/<version>/conversion.go). A type's own
// function replaces the default one, which accepts metadata.name and
// metadata.namespace for every type, cluster-scoped ones included (their
// namespace is ""). So nodes, namespaces, certificate signing requests,
// cluster trust bundles, resource slices and pod certificate requests
// refuse metadata.namespace, and every other built-in type accepts it.
//
// What each field's value is: GetAttrs in pkg/registry/<group>/<resource>/
// strategy.go, on the object after the API server's defaulting. The hub
// reads the served JSON, which has been defaulted; for a field the JSON
// omits, it uses the value the API server's defaulting or formatting gives
// (spec.hostNetwork "false", secrets' type "Opaque"). A field the API server
// accepts but never computes (pods' status.podIPs) is "" for every object,
// as there.
//
// The integration tests check each field against the API server's own LIST
// and watch with the same selector (test/integration/fieldselector_test.go).

// builtinFields describes the fields of one built-in resource type.
type builtinFields struct {
	// noMetadataNamespace is set for the types whose conversion function
	// does not accept metadata.namespace.
	noMetadataNamespace bool
	specs               []*Spec
	aliases             map[string]string
}

var (
	podFields = builtinFields{
		specs: []*Spec{
			{name: "spec.nodeName", value: pathValue("", "spec", "nodeName")},
			{name: "spec.restartPolicy", value: pathValue("Always", "spec", "restartPolicy")},
			{name: "spec.schedulerName", value: pathValue("default-scheduler", "spec", "schedulerName")},
			{name: "spec.serviceAccountName", value: firstValue(pathValue("", "spec", "serviceAccountName"), pathValue("", "spec", "serviceAccount"))},
			{name: "spec.hostNetwork", value: pathValue("false", "spec", "hostNetwork")},
			{name: "status.phase", value: pathValue("", "status", "phase")},
			// The API server reads status.podIPs[0].ip, which its
			// defaulting keeps equal to status.podIP (podIP wins).
			{name: "status.podIP", value: firstValue(pathValue("", "status", "podIP"), firstElementValue([]string{"status", "podIPs"}, "ip"))},
			// Accepted, but the API server never computes it.
			{name: "status.podIPs", value: func([]byte) string { return "" }},
			{name: "status.nominatedNodeName", value: pathValue("", "status", "nominatedNodeName")},
		},
		aliases: map[string]string{"spec.host": "spec.nodeName"},
	}
	coreEventFields = builtinFields{
		specs: []*Spec{
			{name: "involvedObject.kind", value: pathValue("", "involvedObject", "kind")},
			{name: "involvedObject.namespace", value: pathValue("", "involvedObject", "namespace")},
			{name: "involvedObject.name", value: pathValue("", "involvedObject", "name")},
			{name: "involvedObject.uid", value: pathValue("", "involvedObject", "uid")},
			{name: "involvedObject.apiVersion", value: pathValue("", "involvedObject", "apiVersion")},
			{name: "involvedObject.resourceVersion", value: pathValue("", "involvedObject", "resourceVersion")},
			{name: "involvedObject.fieldPath", value: pathValue("", "involvedObject", "fieldPath")},
			{name: "reason", value: pathValue("", "reason")},
			{name: "reportingComponent", value: pathValue("", "reportingComponent")},
			{name: "source", value: firstValue(pathValue("", "source", "component"), pathValue("", "reportingComponent"))},
			{name: "type", value: pathValue("", "type")},
		},
	}
	// events.k8s.io accepts its own names, which the API server maps to
	// the core ones; source is not selectable there.
	eventsV1EventFields = builtinFields{
		specs: []*Spec{
			{name: "regarding.kind", value: pathValue("", "regarding", "kind")},
			{name: "regarding.namespace", value: pathValue("", "regarding", "namespace")},
			{name: "regarding.name", value: pathValue("", "regarding", "name")},
			{name: "regarding.uid", value: pathValue("", "regarding", "uid")},
			{name: "regarding.apiVersion", value: pathValue("", "regarding", "apiVersion")},
			{name: "regarding.resourceVersion", value: pathValue("", "regarding", "resourceVersion")},
			{name: "regarding.fieldPath", value: pathValue("", "regarding", "fieldPath")},
			{name: "reportingController", value: pathValue("", "reportingController")},
			{name: "reason", value: pathValue("", "reason")},
			{name: "type", value: pathValue("", "type")},
		},
	}
	signerNameFields = builtinFields{
		noMetadataNamespace: true,
		specs:               []*Spec{{name: "spec.signerName", value: pathValue("", "spec", "signerName")}},
	}
	podCertificateRequestFields = builtinFields{
		noMetadataNamespace: true,
		specs: []*Spec{
			{name: "spec.signerName", value: pathValue("", "spec", "signerName")},
			{name: "spec.podName", value: pathValue("", "spec", "podName")},
			{name: "spec.nodeName", value: pathValue("", "spec", "nodeName")},
		},
	}
	resourceSliceFields = builtinFields{
		noMetadataNamespace: true,
		specs: []*Spec{
			{name: "spec.nodeName", value: pathValue("", "spec", "nodeName")},
			{name: "spec.driver", value: pathValue("", "spec", "driver")},
			{name: "spec.pool.name", value: pathValue("", "spec", "pool", "name")},
		},
	}
)

// builtinFieldTable holds the built-in types with fields beyond the
// metadata, by the group, version and resource the API server serves them
// under. The beta versions listed register the same functions as their GA
// versions; a cluster serves them only where enabled.
var builtinFieldTable = map[schema.GroupVersionResource]*builtinFields{
	{Version: "v1", Resource: "pods"}: &podFields,
	{Version: "v1", Resource: "nodes"}: {
		noMetadataNamespace: true,
		specs:               []*Spec{{name: "spec.unschedulable", value: pathValue("false", "spec", "unschedulable")}},
	},
	{Version: "v1", Resource: "namespaces"}: {
		noMetadataNamespace: true,
		specs:               []*Spec{{name: "status.phase", value: pathValue("Active", "status", "phase")}},
	},
	{Version: "v1", Resource: "events"}: &coreEventFields,
	{Version: "v1", Resource: "secrets"}: {
		specs: []*Spec{{name: "type", value: pathValue("Opaque", "type")}},
	},
	{Version: "v1", Resource: "services"}: {
		specs: []*Spec{
			{name: "spec.clusterIP", value: pathValue("", "spec", "clusterIP")},
			{name: "spec.type", value: pathValue("ClusterIP", "spec", "type")},
		},
	},
	{Version: "v1", Resource: "replicationcontrollers"}: {
		specs: []*Spec{{name: "status.replicas", value: pathValue("0", "status", "replicas")}},
	},
	{Group: "batch", Version: "v1", Resource: "jobs"}: {
		// The field is named status.successful; the JSON says succeeded.
		specs: []*Spec{{name: "status.successful", value: pathValue("0", "status", "succeeded")}},
	},
	{Group: "events.k8s.io", Version: "v1", Resource: "events"}:                                &eventsV1EventFields,
	{Group: "events.k8s.io", Version: "v1beta1", Resource: "events"}:                           &eventsV1EventFields,
	{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}:      &signerNameFields,
	{Group: "certificates.k8s.io", Version: "v1beta1", Resource: "certificatesigningrequests"}: &signerNameFields,
	{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"}:             &signerNameFields,
	{Group: "certificates.k8s.io", Version: "v1beta1", Resource: "clustertrustbundles"}:        &signerNameFields,
	{Group: "certificates.k8s.io", Version: "v1alpha1", Resource: "clustertrustbundles"}:       &signerNameFields,
	{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}:          &podCertificateRequestFields,
	{Group: "certificates.k8s.io", Version: "v1beta1", Resource: "podcertificaterequests"}:     &podCertificateRequestFields,
	{Group: "certificates.k8s.io", Version: "v1alpha1", Resource: "podcertificaterequests"}:    &podCertificateRequestFields,
	{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}:                      &resourceSliceFields,
	{Group: "resource.k8s.io", Version: "v1beta2", Resource: "resourceslices"}:                 &resourceSliceFields,
	{Group: "resource.k8s.io", Version: "v1beta1", Resource: "resourceslices"}:                 &resourceSliceFields,
}

// builtinFieldSets are the Sets of builtinFieldTable, built once.
var builtinFieldSets = func() map[schema.GroupVersionResource]*Set {
	sets := map[schema.GroupVersionResource]*Set{}
	for gvr, b := range builtinFieldTable {
		sets[gvr] = newSet(!b.noMetadataNamespace, b.specs, b.aliases)
	}
	return sets
}()

// everyMetadataField is the set of built-in types without fields of their
// own, namespaced or not: the API server's default conversion accepts
// metadata.namespace for cluster-scoped ones too.
var everyMetadataField = newSet(true, nil, nil)

// Builtin returns the fields field selectors may name on a resource type
// that is not a custom resource, as the kube-apiserver supports them.
// Other API servers (aggregated APIs) are assumed to use the default
// conversion, as the apiserver library gives them.
func Builtin(gvr schema.GroupVersionResource) *Set {
	if s := builtinFieldSets[gvr]; s != nil {
		return s
	}
	return everyMetadataField
}

// firstValue returns a value function that returns the first of values
// that is not empty.
func firstValue(values ...func([]byte) string) func([]byte) string {
	return func(obj []byte) string {
		for _, value := range values {
			if v := value(obj); v != "" {
				return v
			}
		}
		return ""
	}
}

// firstElementValue returns a value function for a member of the first
// element of the list at listPath.
func firstElementValue(listPath []string, member string) func([]byte) string {
	return func(obj []byte) string {
		list := jsonscan.Lookup(obj, listPath...)
		if len(list) == 0 || list[0] != '[' {
			return ""
		}
		var first []byte
		_, _ = jsonscan.EachElement(list, 0, func(start, end int) {
			if first == nil {
				first = list[start:end]
			}
		})
		if v, ok := jsonscan.ScalarString(jsonscan.Lookup(first, member)); ok {
			return v
		}
		return ""
	}
}
