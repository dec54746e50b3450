package export

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

type memoryCheckpoint struct{ token string }

func (c *memoryCheckpoint) Load() (string, error) { return c.token, nil }
func (c *memoryCheckpoint) Save(token string) error {
	c.token = token
	return nil
}

func ceSink(t *testing.T, url string, timeout time.Duration) *CloudEvents {
	t.Helper()
	p, err := cloudevents.NewHTTP(cloudevents.WithTarget(url))
	if err != nil {
		t.Fatal(err)
	}
	client, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	return &CloudEvents{Client: client, Cluster: "c", Checkpoint: &memoryCheckpoint{}, Timeout: timeout}
}

// A change whose event the receiver refuses as too large goes without its
// object, in its place; the route is not held.
func TestCloudEventsSendsAChangeTheReceiverFindsTooLargeWithoutItsObject(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 100 {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		mu.Lock()
		bodies = append(bodies, r.Header.Get("Ce-Informerhubobjectomitted")+"|"+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	s := ceSink(t, srv.URL, 0)
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	big := `{"metadata":{"name":"big","uid":"u","resourceVersion":"7"},"data":{"k":"` + strings.Repeat("x", 200) + `"}}`
	changes := []Change{
		{Type: hubclient.Added, Resource: cm, Name: "big", UID: "u", ResourceVersion: "7", Object: []byte(big), ResumeToken: "t1"},
		{Type: hubclient.Added, Resource: cm, Name: "small", UID: "v", ResourceVersion: "8", Object: []byte(`{}`), ResumeToken: "t2"},
	}
	if n, err := s.Publish(context.Background(), changes); n != 2 || err != nil {
		t.Fatalf("published %d: %v", n, err)
	}
	if len(bodies) != 2 || !strings.Contains(bodies[0], "413") || !strings.HasPrefix(bodies[0], "the receiver refused") || bodies[1] != "|{}" {
		t.Errorf("the receiver got %q", bodies)
	}
}

// A receiver that never answers has refused the event once the timeout
// passes.
func TestCloudEventsGivesUpOnAReceiverThatDoesNotAnswer(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	s := ceSink(t, srv.URL, 50*time.Millisecond)
	change := Change{Type: hubclient.Added, Name: "a", Object: []byte(`{}`), ResumeToken: "t1"}
	if n, err := s.Publish(context.Background(), []Change{change}); n != 0 || err == nil {
		t.Fatalf("published %d: %v", n, err)
	}
}
