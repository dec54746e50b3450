package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informerhub/informerhub/internal/kubejson"
)

// Object is an object as the API server sent it. It satisfies
// runtime.Object and metav1.Object so that client-go's reflector and FIFO can
// handle it; only name, namespace, uid, resourceVersion, labels and the
// initial-events-end annotation are decoded.
type Object struct {
	metav1.ObjectMeta
	// JSON is never written once the object is decoded: its copies share
	// it, and the hub's object keeps it as a string without a copy
	// (newObject).
	JSON []byte
}

var _ runtime.Object = &Object{}

func (o *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (o *Object) DeepCopyObject() runtime.Object {
	out := &Object{JSON: o.JSON} // JSON is never modified after decoding
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// ObjectList is a LIST response of Objects.
type ObjectList struct {
	metav1.ListMeta
	Items []*Object
}

var _ runtime.Object = &ObjectList{}

func (l *ObjectList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *ObjectList) DeepCopyObject() runtime.Object {
	out := &ObjectList{Items: make([]*Object, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, item := range l.Items {
		out.Items[i] = item.DeepCopyObject().(*Object)
	}
	return out
}

// serializer decodes objects into *Object, LIST responses into
// *ObjectList, and Status objects (errors) into *metav1.Status, which is
// what the REST client needs to report API errors such as 410 Gone. It
// reads each object once (internal/kubejson).
type serializer struct {
	stripManagedFields bool
}

var _ runtime.Serializer = serializer{}

func (s serializer) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case nil:
	case *ObjectList:
		return into, nil, s.decodeList(data, into)
	default:
		return nil, nil, fmt.Errorf("upstream: cannot decode into %T", into)
	}
	var hdr kubejson.Header
	start, end, err := kubejson.DecodeObject(data, &hdr)
	if err != nil {
		return nil, nil, err
	}
	obj, err := s.object(data[start:end], &hdr)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := obj.(*metav1.Status); ok {
		return obj, &schema.GroupVersionKind{Version: "v1", Kind: "Status"}, nil
	}
	return obj, nil, nil
}

// object makes what the reflector receives of an object read into hdr: a
// *metav1.Status for an API error, otherwise a Object of a copy of data.
func (s serializer) object(data []byte, hdr *kubejson.Header) (runtime.Object, error) {
	if hdr.Kind == "Status" {
		status := &metav1.Status{}
		if err := json.Unmarshal(data, status); err != nil {
			return nil, err
		}
		return status, nil
	}
	return s.newRawObject(bytes.Clone(data), hdr)
}

func (s serializer) decodeList(data []byte, into *ObjectList) error {
	var list kubejson.List
	if err := kubejson.DecodeList(data, &list); err != nil {
		return err
	}
	into.ListMeta = metav1.ListMeta{}
	for _, metadata := range list.Metadata { // merged, as encoding/json does
		if err := json.Unmarshal(metadata, &into.ListMeta); err != nil {
			return err
		}
	}
	into.Items = make([]*Object, len(list.Items))
	itemKind, _ := strings.CutSuffix(list.Kind, "List")
	for n := range list.Items {
		item := &list.Items[n]
		obj := bytes.Clone(item.Data)
		if item.Header.Kind == "" && item.Header.APIVersion == "" && itemKind != "" {
			// Items of built-in lists come without their type; watch
			// events carry it. Give them the same, so every object a
			// client receives says what it is, however the hub got it.
			var inserted int
			obj, inserted = withTypeMeta(obj, list.APIVersion, itemKind)
			item.Header.Metadata[0] += inserted
			item.Header.Metadata[1] += inserted
		}
		var err error
		if into.Items[n], err = s.newRawObject(obj, &item.Header); err != nil {
			return err
		}
	}
	return nil
}

// withTypeMeta inserts kind and apiVersion at the start of a JSON object, in
// the order the API server writes them, and says how many bytes it
// inserted.
func withTypeMeta(obj []byte, apiVersion, kind string) ([]byte, int) {
	open := bytes.IndexByte(obj, '{')
	if open < 0 {
		return obj, 0
	}
	kindJSON, _ := json.Marshal(kind)
	apiVersionJSON, _ := json.Marshal(apiVersion)
	out := make([]byte, 0, len(obj)+len(kindJSON)+len(apiVersionJSON)+24)
	out = append(out, obj[:open+1]...)
	out = append(out, `"kind":`...)
	out = append(out, kindJSON...)
	out = append(out, `,"apiVersion":`...)
	out = append(out, apiVersionJSON...)
	if rest := bytes.TrimLeft(obj[open+1:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	inserted := len(out) - (open + 1)
	return append(out, obj[open+1:]...), inserted
}

// newRawObject takes ownership of data, the object hdr was read from.
func (s serializer) newRawObject(data []byte, hdr *kubejson.Header) (*Object, error) {
	if s.stripManagedFields && hdr.ManagedFields {
		stripped, ok, err := kubejson.WithoutManagedFields(data, hdr)
		if err == nil && !ok {
			// Two metadata members, which encoding/json merges.
			stripped, err = RewriteMetadata(data, func(metadata map[string]any) { delete(metadata, "managedFields") })
		}
		if err != nil {
			return nil, err
		}
		data = stripped
	}
	obj := &Object{JSON: data}
	obj.Name = hdr.Name
	obj.Namespace = hdr.Namespace
	obj.UID = types.UID(hdr.UID)
	obj.ResourceVersion = hdr.ResourceVersion
	obj.Labels = hdr.Labels
	if hdr.InitialEventsEnd {
		obj.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return obj, nil
}

func (serializer) Encode(obj runtime.Object, _ io.Writer) error {
	return fmt.Errorf("upstream: encoding %T is not supported: the hub only reads", obj)
}

func (serializer) Identifier() runtime.Identifier { return "informerhub-raw-json" }

// rewriteMetadata applies edit to the metadata of a JSON object and encodes
// it again. Numbers are kept exactly (json.Number); key order becomes sorted.
// The hub only does this where it must change an object: stripping
// managedFields, and the resourceVersion of a DELETED sent because an object
// left a selector.
func RewriteMetadata(data []byte, edit func(metadata map[string]any)) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	metadata, ok := obj["metadata"].(map[string]any)
	if !ok {
		return nil, errors.New("object has no metadata")
	}
	edit(metadata)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// negotiatedSerializer plugs serializer into a REST client for
// responses. It has no stream serializer: watches are read by watchDecoder,
// over Request.Stream.
type negotiatedSerializer struct {
	mediaTypes []runtime.SerializerInfo
}

func newNegotiatedSerializer(stripManagedFields bool) negotiatedSerializer {
	return negotiatedSerializer{mediaTypes: []runtime.SerializerInfo{{
		MediaType:        "application/json",
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       serializer{stripManagedFields: stripManagedFields},
	}}}
}

func (s negotiatedSerializer) SupportedMediaTypes() []runtime.SerializerInfo { return s.mediaTypes }

func (negotiatedSerializer) EncoderForVersion(encoder runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return encoder
}

func (negotiatedSerializer) DecoderToVersion(decoder runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return decoder
}
