package export

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func TestSubjectTokensHoldNoSeparatorsOrWildcards(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "_",
		"web-0":             "web-0",
		"kube-root-ca.crt":  "kube-root-ca%2Ecrt",
		"a*b>c d%e":         "a%2Ab%3Ec%20d%25e",
		"tab\tline\nreturn": "tab%09line%0Areturn",
	} {
		if got := subjectToken(in); got != want {
			t.Errorf("subjectToken(%q) = %q, want %q", in, got, want)
		}
	}
	subject, err := ParseSubject("k8s.{{.Group}}.{{.Resource}}.{{.Namespace}}.{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	s := &JetStream{Subject: subject, Cluster: "c"}
	msg, _, err := s.message(Change{Type: hubclient.Added, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Namespace: "demo", Name: "kube-root-ca.crt", ResourceVersion: "7", ResumeToken: "tok", Object: []byte("{}")}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "k8s._.configmaps.demo.kube-root-ca%2Ecrt" || msg.Header.Get(HeaderResumeToken) != "tok" || !bytes.Equal(msg.Data, []byte("{}")) {
		t.Errorf("message %q, headers %v, data %s", msg.Subject, msg.Header, msg.Data)
	}
}

func TestAChangesIDIsOfItsIdentityAlone(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	c := Change{Type: hubclient.Modified, Resource: cm, Namespace: "demo", Name: "a", UID: "u1", ResourceVersion: "7", ResumeToken: "t1"}
	again := c
	again.ResumeToken, again.Object = "t2", []byte("{}") // exported again, from elsewhere
	if c.ID("prod") != again.ID("prod") || len(c.ID("prod")) != 32 {
		t.Errorf("the same change has ids %s and %s", c.ID("prod"), again.ID("prod"))
	}
	for _, other := range []Change{
		{Type: hubclient.Deleted, Resource: cm, UID: "u1", ResourceVersion: "7"},
		{Type: hubclient.Modified, Resource: cm, UID: "u2", ResourceVersion: "7"},
		{Type: hubclient.Modified, Resource: cm, UID: "u1", ResourceVersion: "8"},
		{Type: hubclient.Modified, Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, UID: "u1", ResourceVersion: "7"},
	} {
		if other.ID("prod") == c.ID("prod") {
			t.Errorf("%+v has the id of %+v", other, c)
		}
	}
	if c.ID("prod") == c.ID("staging") {
		t.Error("the same change in two clusters has one id")
	}
}

func TestBookmarksAreNoChanges(t *testing.T) {
	if _, ok, err := changeOf(schema.GroupVersionResource{}, hubclient.Event{Type: hubclient.Bookmark}); ok || err != nil {
		t.Errorf("a bookmark: %v, %v", ok, err)
	}
	if _, _, err := changeOf(schema.GroupVersionResource{}, hubclient.Event{Type: hubclient.Added, Object: []byte("{")}); err == nil {
		t.Error("an object that is not JSON made a change")
	}
}
