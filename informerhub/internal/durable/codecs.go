package durable

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"
)

// secrets is the resource type the disk history writes only encrypted:
// without an encryption of it, its history stays in memory.
var secrets = schema.GroupResource{Resource: "secrets"}

// codec is how the disk history writes one resource type.
type codec struct {
	// transformer seals its objects (historystore): the one
	// Config.Transformers gives it; nil without them, which the
	// store takes for identity (values as they are, and encrypted ones
	// refused, as the API server without an EncryptionConfiguration).
	transformer value.Transformer
	// writes is unset for a resource type whose history stays in memory:
	// Secrets, unless transformer encrypts them.
	writes bool
}

// codecs resolves each resource type's codec once, from
// Config.Transformers.
type codecs struct {
	transformers value.ResourceTransformers // nil: identity for every type

	mu         sync.Mutex // guards byResource
	byResource map[string]codec
}

func newCodecs(transformers value.ResourceTransformers) *codecs {
	return &codecs{transformers: transformers, byResource: map[string]codec{}}
}

// of returns how the disk history writes a resource type, named as tokens
// and the store name it ("secrets.v1", "deployments.v1.apps").
func (c *codecs) of(resource string) codec {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dc, ok := c.byResource[resource]; ok {
		return dc
	}
	gr := parseResource(resource)
	var dc codec
	if c.transformers != nil {
		dc.transformer = c.transformers.TransformerForResource(gr)
	}
	dc.writes = gr != secrets || dc.transformer != nil && encrypts(dc.transformer)
	c.byResource[resource] = dc
	return dc
}

// encrypts reports whether t writes anything but the values it is given.
// Identity, the provider of a resource type no entry of an
// EncryptionConfiguration names or whose first provider it is, writes a
// value as it is; every other provider writes it encrypted (prefixed with
// k8s:enc:), or fails (a KMS plugin that does not answer yet), never
// writing it as it is.
func encrypts(t value.Transformer) bool {
	probe := []byte("informerhub: is this written as it is?")
	out, err := t.TransformToStorage(context.Background(), bytes.Clone(probe), value.DefaultContext("probe"))
	return err != nil || !bytes.Equal(out, probe)
}

// parseResource is the group and resource of a resource type named as
// upstream.FormatResource names it: resource.version or
// resource.version.group (resources and versions hold no dot).
func parseResource(resource string) schema.GroupResource {
	parts := strings.SplitN(resource, ".", 3)
	gr := schema.GroupResource{Resource: parts[0]}
	if len(parts) == 3 {
		gr.Group = parts[2]
	}
	return gr
}
