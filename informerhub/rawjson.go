package informerhub

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
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
)

// This file decodes the API server's JSON into rawObjects: the object's bytes
// are kept as they came, and only the metadata the hub uses is decoded. The
// hub never builds an Unstructured map of an object, and never re-encodes
// one, so each event costs one parse and subscribers see the API server's own
// JSON.

// rawObject is an object as the API server sent it. It satisfies
// runtime.Object and metav1.Object so that client-go's reflector and FIFO can
// handle it; only name, namespace, uid, resourceVersion, labels and the
// initial-events-end annotation are decoded.
type rawObject struct {
	metav1.ObjectMeta
	JSON []byte
}

var _ runtime.Object = &rawObject{}

func (o *rawObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (o *rawObject) DeepCopyObject() runtime.Object {
	out := &rawObject{JSON: o.JSON} // JSON is never modified after decoding
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// rawObjectList is a LIST response of rawObjects.
type rawObjectList struct {
	metav1.ListMeta
	Items []*rawObject
}

var _ runtime.Object = &rawObjectList{}

func (l *rawObjectList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *rawObjectList) DeepCopyObject() runtime.Object {
	out := &rawObjectList{Items: make([]*rawObject, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, item := range l.Items {
		out.Items[i] = item.DeepCopyObject().(*rawObject)
	}
	return out
}

// rawHeader is the part of an object's JSON that the hub decodes.
type rawHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     initialEventsEnd  `json:"annotations"`
	} `json:"metadata"`
}

// initialEventsEnd decodes only the one annotation the reflector needs from a
// watch-list bookmark, so the (often large) annotations of ordinary objects are
// skipped rather than copied into maps.
type initialEventsEnd bool

func (e *initialEventsEnd) UnmarshalJSON(data []byte) error {
	if !bytes.Contains(data, []byte(metav1.InitialEventsAnnotationKey)) {
		return nil
	}
	var annotations map[string]string
	if err := json.Unmarshal(data, &annotations); err != nil {
		return err
	}
	*e = annotations[metav1.InitialEventsAnnotationKey] == "true"
	return nil
}

// rawSerializer decodes objects into *rawObject, LIST responses into
// *rawObjectList, and Status objects (errors) into *metav1.Status, which is
// what the REST client needs to report API errors such as 410 Gone.
type rawSerializer struct {
	stripManagedFields bool
}

var _ runtime.Serializer = rawSerializer{}

func (s rawSerializer) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case nil:
	case *rawObjectList:
		return into, nil, s.decodeList(data, into)
	default:
		return nil, nil, fmt.Errorf("informerhub: cannot decode into %T", into)
	}
	var hdr rawHeader
	if err := json.Unmarshal(data, &hdr); err != nil {
		return nil, nil, err
	}
	if hdr.Kind == "Status" {
		status := &metav1.Status{}
		if err := json.Unmarshal(data, status); err != nil {
			return nil, nil, err
		}
		return status, &schema.GroupVersionKind{Version: "v1", Kind: "Status"}, nil
	}
	obj, err := s.newRawObject(bytes.Clone(data), &hdr)
	return obj, nil, err
}

func (s rawSerializer) decodeList(data []byte, into *rawObjectList) error {
	var list struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	into.ListMeta = list.Metadata
	into.Items = make([]*rawObject, len(list.Items))
	itemKind, _ := strings.CutSuffix(list.Kind, "List")
	for i, item := range list.Items {
		var hdr rawHeader
		if err := json.Unmarshal(item, &hdr); err != nil {
			return err
		}
		if hdr.Kind == "" && hdr.APIVersion == "" && itemKind != "" {
			// Items of built-in lists come without their type; watch
			// events carry it. Give them the same, so every object a
			// client receives says what it is, however the hub got it.
			item = withTypeMeta(item, list.APIVersion, itemKind)
		}
		obj, err := s.newRawObject(item, &hdr)
		if err != nil {
			return err
		}
		into.Items[i] = obj
	}
	return nil
}

// withTypeMeta inserts kind and apiVersion at the start of a JSON object, in
// the order the API server writes them.
func withTypeMeta(obj []byte, apiVersion, kind string) []byte {
	open := bytes.IndexByte(obj, '{')
	if open < 0 {
		return obj
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
	return append(out, obj[open+1:]...)
}

// newRawObject takes ownership of data.
func (s rawSerializer) newRawObject(data []byte, hdr *rawHeader) (*rawObject, error) {
	if s.stripManagedFields && bytes.Contains(data, []byte(`"managedFields"`)) {
		stripped, err := rewriteMetadata(data, func(metadata map[string]any) { delete(metadata, "managedFields") })
		if err != nil {
			return nil, err
		}
		data = stripped
	}
	obj := &rawObject{JSON: data}
	obj.Name = hdr.Metadata.Name
	obj.Namespace = hdr.Metadata.Namespace
	obj.UID = types.UID(hdr.Metadata.UID)
	obj.ResourceVersion = hdr.Metadata.ResourceVersion
	obj.Labels = hdr.Metadata.Labels
	if hdr.Metadata.Annotations {
		obj.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return obj, nil
}

func (rawSerializer) Encode(obj runtime.Object, _ io.Writer) error {
	return fmt.Errorf("informerhub: encoding %T is not supported: the hub only reads", obj)
}

func (rawSerializer) Identifier() runtime.Identifier { return "informerhub-raw-json" }

// rewriteMetadata applies edit to the metadata of a JSON object and encodes
// it again. Numbers are kept exactly (json.Number); key order becomes sorted.
// The hub only does this where it must change an object: stripping
// managedFields, and the resourceVersion of a DELETED sent because an object
// left a selector.
func rewriteMetadata(data []byte, edit func(metadata map[string]any)) ([]byte, error) {
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

// rawNegotiatedSerializer plugs rawSerializer into a REST client: responses
// are decoded by it, watch frames by the standard JSON serializer for
// metav1.WatchEvent (whose embedded object then goes to rawSerializer).
type rawNegotiatedSerializer struct {
	mediaTypes []runtime.SerializerInfo
}

func newRawNegotiatedSerializer(stripManagedFields bool) rawNegotiatedSerializer {
	watchEvents := runtime.NewScheme()
	metav1.AddToGroupVersion(watchEvents, schema.GroupVersion{Version: "v1"})
	return rawNegotiatedSerializer{mediaTypes: []runtime.SerializerInfo{{
		MediaType:        "application/json",
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       rawSerializer{stripManagedFields: stripManagedFields},
		StreamSerializer: &runtime.StreamSerializerInfo{
			EncodesAsText: true,
			Serializer:    jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, watchEvents, watchEvents, jsonserializer.SerializerOptions{}),
			Framer:        jsonserializer.Framer,
		},
	}}}
}

func (s rawNegotiatedSerializer) SupportedMediaTypes() []runtime.SerializerInfo { return s.mediaTypes }

func (rawNegotiatedSerializer) EncoderForVersion(encoder runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return encoder
}

func (rawNegotiatedSerializer) DecoderToVersion(decoder runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return decoder
}
