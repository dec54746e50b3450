package export

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// Config is informerhub-export's configuration file (YAML): the hub to
// read from, the sinks, and the routes between them.
type Config struct {
	// Cluster names the cluster in the changes' ids: two clusters'
	// changes never share one. Required.
	Cluster string `json:"cluster"`
	Hub     Hub    `json:"hub"`
	// NATS is the NATS server of the routes to JetStream.
	NATS   *NATS         `json:"nats,omitempty"`
	Routes []RouteConfig `json:"routes"`
}

// Hub is how to reach the hub.
type Hub struct {
	// Addresses are the hub's replicas, host:port. Required.
	Addresses []string `json:"addresses"`
	// Insecure connects without TLS; CAFile verifies the hub with these
	// certificates instead of the system's.
	Insecure bool   `json:"insecure,omitempty"`
	CAFile   string `json:"caFile,omitempty"`
	// TokenFile holds the bearer token the hub authenticates the
	// exporter by (a service account's), read again for every call.
	TokenFile string `json:"tokenFile,omitempty"`
}

// NATS is how to reach a NATS server with JetStream.
type NATS struct {
	URL string `json:"url"`
}

// RouteConfig is one route: a selection and its sink.
type RouteConfig struct {
	// Name names the route in logs and metrics. Required, unique.
	Name     string         `json:"name"`
	Selector SelectorConfig `json:"selector"`
	// Fields projects the exported objects, as a Watch's fields do
	// (hubclient.WatchOptions.Fields): a change that changes none of them
	// is not exported. Empty: whole objects.
	Fields []string `json:"fields,omitempty"`
	// JetStream publishes the route to a stream of its own.
	JetStream *JetStreamRoute `json:"jetstream,omitempty"`
	// CloudEvents sends the route as CloudEvents over HTTP.
	CloudEvents *CloudEventsRoute `json:"cloudevents,omitempty"`
	// Kafka publishes the route to a Kafka topic of its own (kafka.go).
	Kafka *KafkaRoute `json:"kafka,omitempty"`
}

// CloudEventsRoute is where a route's CloudEvents go, and where its resume
// point is kept.
type CloudEventsRoute struct {
	// URL receives the events (HTTP POST). Required.
	URL string `json:"url"`
	// Mode is "binary" (the default: attributes in headers, the object as
	// the body) or "structured" (the whole event as JSON).
	Mode string `json:"mode,omitempty"`
	// Checkpoint is the file the resume point is kept in, on a volume of
	// the route's own. Required.
	Checkpoint string `json:"checkpoint"`
}

// SelectorConfig is a hub selector (hubclient.Selector).
type SelectorConfig struct {
	Group         string `json:"group,omitempty"`
	Version       string `json:"version"`
	Resource      string `json:"resource"`
	Namespace     string `json:"namespace,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	FieldSelector string `json:"fieldSelector,omitempty"`
	Filter        string `json:"filter,omitempty"`
}

// Selector is the hub's selector.
func (s SelectorConfig) Selector() hubclient.Selector {
	return hubclient.Selector{Resource: schema.GroupVersionResource{Group: s.Group, Version: s.Version, Resource: s.Resource},
		Namespace: s.Namespace, LabelSelector: s.LabelSelector, FieldSelector: s.FieldSelector, Filter: s.Filter}
}

// JetStreamRoute is a route's stream, which must exist and hold the
// route's messages alone, and the subject of each change (ParseSubject).
type JetStreamRoute struct {
	Stream  string `json:"stream"`
	Subject string `json:"subject"`
}

// LoadConfig reads and checks a configuration file; a field it does not
// know is an error.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) check() error {
	var errs []error
	if c.Cluster == "" {
		errs = append(errs, errors.New("cluster: required: it names the cluster in the changes' ids"))
	}
	if len(c.Hub.Addresses) == 0 {
		errs = append(errs, errors.New("hub.addresses: required"))
	}
	if c.Hub.Insecure && c.Hub.CAFile != "" {
		errs = append(errs, errors.New("hub: insecure contradicts caFile"))
	}
	if len(c.Routes) == 0 {
		errs = append(errs, errors.New("routes: none"))
	}
	names, streams, checkpoints := map[string]bool{}, map[string]string{}, map[string]string{}
	topics, transactionalIDs := map[string]string{}, map[string]string{}
	for i, r := range c.Routes {
		at := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: required", at))
		case names[r.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q names another route too", at, r.Name))
		}
		names[r.Name] = true
		if r.Selector.Version == "" || r.Selector.Resource == "" {
			errs = append(errs, fmt.Errorf("%s.selector: version and resource are required", at))
		}
		switch sinks := btoi(r.JetStream != nil) + btoi(r.CloudEvents != nil) + btoi(r.Kafka != nil); {
		case sinks == 0:
			errs = append(errs, fmt.Errorf("%s: no sink (jetstream, cloudevents or kafka)", at))
			continue
		case sinks > 1:
			errs = append(errs, fmt.Errorf("%s: %d sinks: a route has one (jetstream, cloudevents or kafka); make more routes", at, sinks))
			continue
		case r.Kafka != nil:
			errs = append(errs, checkKafka(at, r.Name, r.Kafka, topics, transactionalIDs)...)
			continue
		case r.CloudEvents != nil:
			ce := r.CloudEvents
			if ce.URL == "" {
				errs = append(errs, fmt.Errorf("%s.cloudevents.url: required", at))
			}
			if ce.Mode != "" && ce.Mode != "binary" && ce.Mode != "structured" {
				errs = append(errs, fmt.Errorf("%s.cloudevents.mode: binary or structured, not %q", at, ce.Mode))
			}
			switch other, taken := checkpoints[ce.Checkpoint]; {
			case ce.Checkpoint == "":
				errs = append(errs, fmt.Errorf("%s.cloudevents.checkpoint: required: the file the route's resume point is kept in", at))
			case taken:
				errs = append(errs, fmt.Errorf("%s.cloudevents.checkpoint: %s is route %s's", at, ce.Checkpoint, other))
			}
			checkpoints[ce.Checkpoint] = r.Name
			continue
		}
		if c.NATS == nil || c.NATS.URL == "" {
			errs = append(errs, fmt.Errorf("%s.jetstream: nats.url is required", at))
		}
		switch other, taken := streams[r.JetStream.Stream]; {
		case r.JetStream.Stream == "":
			errs = append(errs, fmt.Errorf("%s.jetstream.stream: required", at))
		case taken:
			errs = append(errs, fmt.Errorf("%s.jetstream.stream: %s is route %s's: a stream holds one route's messages, the last of which says where it resumes", at, r.JetStream.Stream, other))
		}
		streams[r.JetStream.Stream] = r.Name
		if r.JetStream.Subject == "" {
			errs = append(errs, fmt.Errorf("%s.jetstream.subject: required, such as k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}", at))
		} else if _, err := ParseSubject(r.JetStream.Subject); err != nil {
			errs = append(errs, fmt.Errorf("%s.jetstream.subject: %w", at, err))
		}
	}
	return errors.Join(errs...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
