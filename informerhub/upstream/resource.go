package upstream

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/fieldset"
)

// ResourceInfo describes a resource type the cluster serves.
type ResourceInfo struct {
	Resource   schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// ShortNames and SingularName are what discovery names the type by
	// besides its plural ("cm", "configmap"), for clients that take the
	// names kubectl takes. SingularName is the kind in lower case where
	// discovery gives none.
	ShortNames   []string
	SingularName string
	// Fields are the fields its field selectors may name; nil means those
	// of a built-in type (fieldset.Builtin).
	Fields *fieldset.Set
	// PrinterColumns are a custom resource's additionalPrinterColumns, of
	// its version, as its CRD lists them; nil for a built-in type, whose
	// columns clients know (as kubectl's printers do). Shared: read only.
	PrinterColumns []PrinterColumn
}

// FieldSet returns the fields field selectors of the resource type may name.
func (i *ResourceInfo) FieldSet() *fieldset.Set {
	if i.Fields != nil {
		return i.Fields
	}
	return fieldset.Builtin(i.Resource)
}

// ErrNotServed: the cluster does not serve the resource type.
var ErrNotServed = errors.New("the cluster does not serve the resource type")

// UnwatchableError: the cluster serves the resource, but it cannot be
// listed and watched (a subresource, or a resource without those verbs).
type UnwatchableError struct {
	Reason string // why, for a person
}

func (e *UnwatchableError) Error() string { return e.Reason }

// DiscoveryError: the API server's discovery failed, for one group version
// or (zero GroupVersion) for all.
type DiscoveryError struct {
	GroupVersion schema.GroupVersion
	Err          error
}

func (e *DiscoveryError) Error() string {
	if e.GroupVersion.Empty() {
		return fmt.Sprintf("discovery failed: %v", e.Err)
	}
	return fmt.Sprintf("discovery of %s failed: %v", e.GroupVersion, e.Err)
}

func (e *DiscoveryError) Unwrap() error { return e.Err }

// FormatResource names a resource type the way kubectl does: "configmaps.v1",
// "deployments.v1.apps".
func FormatResource(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// infoOf is the ResourceInfo of a resource discovery lists in gv.
func infoOf(gv schema.GroupVersion, res metav1.APIResource) ResourceInfo {
	singular := res.SingularName
	if singular == "" {
		singular = strings.ToLower(res.Kind)
	}
	return ResourceInfo{Resource: gv.WithResource(res.Name), Kind: res.Kind, Namespaced: res.Namespaced,
		ShortNames: res.ShortNames, SingularName: singular}
}
