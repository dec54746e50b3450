package export

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAConfigLoadsWithItsRoutes(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, `
cluster: prod
hub: {addresses: ["informerhub:8080"], tokenFile: /var/run/secrets/token}
nats: {url: "nats://nats:4222"}
routes:
- name: pods
  selector: {version: v1, resource: pods, fieldSelector: spec.nodeName=node-1}
  fields: [status.phase]
  jetstream: {stream: PODS, subject: "k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}"}
- name: audit
  selector: {group: rbac.authorization.k8s.io, version: v1, resource: rolebindings}
  cloudevents: {url: "https://events.example.com/", mode: structured, checkpoint: /var/lib/export/audit}
`))
	if err != nil {
		t.Fatal(err)
	}
	sel := cfg.Routes[0].Selector.Selector()
	if sel.Resource.Resource != "pods" || sel.FieldSelector != "spec.nodeName=node-1" || cfg.Routes[0].JetStream.Stream != "PODS" ||
		cfg.Routes[1].CloudEvents.Mode != "structured" || len(cfg.Routes[0].Fields) != 1 {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestAConfigSaysEverythingWrongWithIt(t *testing.T) {
	_, err := LoadConfig(writeConfig(t, `
hub: {addresses: []}
routes:
- name: a
  selector: {resource: pods}
  jetstream: {stream: S, subject: "k8s.{{.Nope"}
- name: a
  selector: {version: v1, resource: pods}
  jetstream: {stream: S, subject: ""}
- name: b
  selector: {version: v1, resource: pods}
- name: c
  selector: {version: v1, resource: pods}
  cloudevents: {mode: json}
`))
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		"cluster: required", "hub.addresses: required", "routes[0].selector: version and resource are required",
		"routes[0].jetstream: nats.url is required", "routes[0].jetstream.subject: template", `routes[1].name: "a" names another route too`,
		"routes[1].jetstream.stream: S is route a's", "routes[1].jetstream.subject: required", "routes[2]: no sink",
		"routes[3].cloudevents.url: required", `routes[3].cloudevents.mode: binary or structured, not "json"`, "routes[3].cloudevents.checkpoint: required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if _, err := LoadConfig(writeConfig(t, "cluster: c\nhub: {addresses: [h:1]}\nroutess: []\n")); err == nil || !strings.Contains(err.Error(), "routess") {
		t.Errorf("an unknown field: %v", err)
	}
}

func TestAKafkaRouteHasItsTopicsAndTransactionalIDToItself(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, `
cluster: prod
hub: {addresses: ["informerhub:8080"]}
routes:
- name: pods
  selector: {version: v1, resource: pods}
  kafka: {brokers: ["kafka-0:9092", "kafka-1:9092"], topic: pods}
- name: secrets
  selector: {version: v1, resource: secrets}
  kafka: {brokers: ["kafka-0:9092"], topic: secrets, checkpointTopic: checkpoints, transactionalID: export-secrets, maxRecordBytes: 4096}
`))
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Routes[0].Kafka; k.Topic != "pods" || k.Checkpoint() != "pods.informerhub-checkpoint" || len(k.Brokers) != 2 {
		t.Errorf("route pods: %+v", k)
	}
	if k := cfg.Routes[1].Kafka; k.Checkpoint() != "checkpoints" || k.TransactionalID != "export-secrets" || k.MaxRecordBytes != 4096 {
		t.Errorf("route secrets: %+v", k)
	}

	_, err = LoadConfig(writeConfig(t, `
cluster: prod
hub: {addresses: ["informerhub:8080"]}
nats: {url: "nats://nats:4222"}
routes:
- name: a
  selector: {version: v1, resource: pods}
  kafka: {brokers: [k:9092], topic: pods}
- name: b
  selector: {version: v1, resource: pods}
  kafka: {brokers: [], topic: pods, checkpointTopic: pods, transactionalID: informerhub-export-a, maxRecordBytes: 10}
- name: c
  selector: {version: v1, resource: pods}
  kafka: {brokers: [k:9092], topic: c}
  jetstream: {stream: S, subject: "k8s.{{.Name}}"}
- name: d
  selector: {version: v1, resource: pods}
  kafka: {brokers: [k:9092], topic: d, checkpointTopic: pods.informerhub-checkpoint}
`))
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		"routes[1].kafka.brokers: required", "routes[1].kafka.checkpointTopic: the changes' topic",
		"routes[1].kafka.topic: pods is route a's", "routes[1].kafka.transactionalID: informerhub-export-a is route a's",
		"routes[1].kafka.maxRecordBytes: 10 is too small", "routes[2]: 2 sinks: a route has one (jetstream, cloudevents or kafka)",
		"routes[3].kafka.checkpointTopic: pods.informerhub-checkpoint is route a's",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
