package integration

import (
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kmsapi "k8s.io/kms/apis/v2"
	kmsservice "k8s.io/kms/pkg/service"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/test/checker"
)

// TestNoSecretInPlaintextOnDisk: the hub process keeps a disk history
// (--history-dir) of Secrets and ConfigMaps (--retain), without and with
// --history-encryption-config (aesgcm for secrets, or a KMS v2 plugin the
// test serves on a Unix socket). A Secret holds a
// random marker in its data (base64 in its JSON), a label and an
// annotation; the hub is killed (SIGKILL) and restarted, the Secret
// changing meanwhile. No file under --history-dir (Pebble's write-ahead
// log, tables, manifests) ever holds the marker, in either mode: right
// after the kill, and after a graceful stop, which writes everything. A
// ConfigMap's marker, written as it is, is the control: the same search
// finds it. A token taken before the kill resumes exactly: the next event
// is the change made while the hub was down. Without a configuration the
// hub says that Secrets stay in memory, and resumes them from the API
// server; with one, their history is on disk, encrypted, and a restarted
// hub resumes them from it as other types.
func TestNoSecretInPlaintextOnDisk(t *testing.T) {
	for _, mode := range []struct {
		name string
		// config writes the encryption config; nil: none. prefix is what
		// its encrypted values begin with.
		config func(*testing.T) string
		prefix string
	}{
		{name: "without an encryption config"},
		{name: "with an aesgcm config", config: aesgcmSecretsConfig, prefix: "k8s:enc:aesgcm:v1:key1:"},
		{name: "with a KMS v2 plugin", config: kmsSecretsConfig, prefix: "k8s:enc:kms:v2:testkms:"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			encrypted := mode.config != nil
			ns := namespace(t)
			dir := t.TempDir()
			args := []string{"--history-dir", dir, "--retain", "secrets,configmaps", "--log-level", "info"}
			if encrypted {
				args = append(args, "--history-encryption-config", mode.config(t))
			}
			hub := startHubProcess(t, args...)
			conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := informerhubv1.NewInformerHubServiceClient(conn)
			secretSelector := &informerhubv1.ResourceSelector{Version: "v1", Resource: "secrets", Namespace: ns}

			var tr checker.Transcript
			readUntil(t, client, &informerhubv1.WatchRequest{Selector: secretSelector, SendInitialEvents: true}, &tr, endOfInitialEvents)
			marker, control := rand.Text(), rand.Text()
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"marker": marker}, Annotations: map[string]string{"marker": marker}},
				Data:       map[string][]byte{"k": []byte(marker)},
			}
			if _, err := kube.CoreV1().Secrets(ns).Create(ctxFor(t), secret, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			createConfigMap(t, ns, "control", nil, control)
			readUntil(t, client, &informerhubv1.WatchRequest{Selector: secretSelector, ResumeToken: tr.LastToken()}, &tr, "s")
			beforeKill := tr.LastToken()
			// The control's change reached the hub, to be written by the
			// graceful stop at the latest.
			readUntil(t, client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}, &checker.Transcript{}, "control")

			hub.Kill()
			if found := hubtest.FilesHolding(t, dir, marker); len(found) > 0 {
				t.Errorf("after SIGKILL, %v hold the Secret's marker", found)
			}
			// While no hub runs.
			later := rand.Text()
			secret.Labels["marker"], secret.Annotations["marker"], secret.Data["k"] = later, later, []byte(later)
			updated, err := kube.CoreV1().Secrets(ns).Update(ctxFor(t), secret, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hub.Restart()
			resumeExactly(t, client, secretSelector, beforeKill, updated.ResourceVersion, later)

			hub.Terminate(time.Minute) // writes everything
			for _, m := range []string{marker, later} {
				if found := hubtest.FilesHolding(t, dir, m); len(found) > 0 {
					t.Errorf("after a graceful stop, %v hold a Secret's marker", found)
				}
			}
			if found := hubtest.FilesHolding(t, dir, control); len(found) == 0 {
				t.Error("no file holds the ConfigMap's marker, written as it is: the search finds nothing")
			}
			encryptedValues := hubtest.FilesHolding(t, dir, cmp.Or(mode.prefix, "k8s:enc:"))
			if encrypted && len(encryptedValues) == 0 {
				t.Error("no file holds a value encrypted with the configuration's key: the Secrets are not on disk")
			}
			if !encrypted && len(encryptedValues) > 0 {
				t.Errorf("%v hold encrypted values without an encryption config", encryptedValues)
			}

			hub.Restart()
			resumeExactly(t, client, secretSelector, beforeKill, updated.ResourceVersion, later)
			resumedFromDisk := regexp.MustCompile(`msg="resuming from the history on disk" resource=secrets\.v1 `).MatchString(hub.Output())
			inMemory := strings.Count(hub.Output(), "Secrets are not written to the history on disk")
			if encrypted && (!resumedFromDisk || inMemory != 0) {
				t.Errorf("with the configuration, after a graceful stop: Secrets resumed from the disk %v, said to stay in memory %d times; want from the disk", resumedFromDisk, inMemory)
			}
			if !encrypted && (resumedFromDisk || inMemory != 3) {
				t.Errorf("without a configuration: Secrets resumed from the disk %v, said to stay in memory %d times; want in memory, said once per start (3)", resumedFromDisk, inMemory)
			}
		})
	}
}

// aesgcmSecretsConfig writes an EncryptionConfiguration that encrypts
// secrets with aesgcm, a random key named key1, and returns its path.
func aesgcmSecretsConfig(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - name: key1
        secret: %s
`, base64.StdEncoding.EncodeToString(key))
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kmsSecretsConfig serves a KMS v2 plugin on a Unix socket for the test's
// duration, with k8s.io/kms's own gRPC service, and writes an
// EncryptionConfiguration that encrypts secrets with it (provider
// testkms); it returns the configuration's path.
func kmsSecretsConfig(t *testing.T) string {
	t.Helper()
	// A short directory: a Unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "kms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kms.sock")
	// GRPCService's handlers on a listener and server of the test's own,
	// listening before the hub starts and stopped for sure at the end
	// (its ListenAndServe makes its server where Shutdown may not see it).
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kmsapi.RegisterKeyManagementServiceServer(srv, kmsservice.NewGRPCService(socket, 5*time.Second, newTestKMS(t)))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("the KMS plugin: %v", err)
		}
	})
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - kms:
      apiVersion: v2
      name: testkms
      endpoint: unix://%s
      timeout: 5s
`, socket)
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testKMS is a KMS v2 plugin's key service: AES-GCM with a key of its own,
// as a cloud KMS seals the data encryption keys the API server (here, the
// hub) sends it.
type testKMS struct{ aead cipher.AEAD }

func newTestKMS(t *testing.T) *testKMS {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return &testKMS{aead: aead}
}

const testKMSKeyID = "test-key-1"

func (k *testKMS) Encrypt(_ context.Context, _ string, data []byte) (*kmsservice.EncryptResponse, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &kmsservice.EncryptResponse{Ciphertext: k.aead.Seal(nonce, nonce, data, nil), KeyID: testKMSKeyID}, nil
}

func (k *testKMS) Decrypt(_ context.Context, _ string, req *kmsservice.DecryptRequest) ([]byte, error) {
	if len(req.Ciphertext) < k.aead.NonceSize() {
		return nil, errors.New("ciphertext too short")
	}
	nonce, sealed := req.Ciphertext[:k.aead.NonceSize()], req.Ciphertext[k.aead.NonceSize():]
	return k.aead.Open(nil, nonce, sealed, nil)
}

func (k *testKMS) Status(context.Context) (*kmsservice.StatusResponse, error) {
	return &kmsservice.StatusResponse{Version: "v2", Healthz: "ok", KeyID: testKMSKeyID}, nil
}

// resumeExactly resumes a Watch of sel from token and checks that the
// next change is the MODIFIED of Secret s at rv, holding marker in its
// data: the change made after the token, nothing lost or repeated.
func resumeExactly(t *testing.T, client informerhubv1.InformerHubServiceClient, sel *informerhubv1.ResourceSelector, token, rv, marker string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	stream, err := client.Watch(ctx, &informerhubv1.WatchRequest{Selector: sel, ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("resuming from the token before the kill: %v", err)
		}
		if resp.GetType() == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
			continue
		}
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		if e.Type != checker.Modified || e.Name != "s" || e.ResourceVersion != rv || e.FromRelist ||
			!strings.Contains(resp.GetObject(), base64.StdEncoding.EncodeToString([]byte(marker))) {
			t.Errorf("after the token before the kill: %s %s@%s from_relist=%v, want the MODIFIED of s at %s with its new data", e.Type, e.Name, e.ResourceVersion, e.FromRelist, rv)
		}
		return
	}
}
