// Module nats pins the NATS server (with JetStream) that the tests of
// informerhub-export publish to: internal/natstest starts it as a process,
// as internal/controlplane starts kube-apiserver and etcd. It is kept apart
// from the main module so that the server's dependency graph never leaks
// into informerhub's; the main module needs only the client, nats.go.
module github.com/informerhub/informerhub/tools/nats

go 1.26.0

tool github.com/nats-io/nats-server/v2

require (
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nats-server/v2 v2.15.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
