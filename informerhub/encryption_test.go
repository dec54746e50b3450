package informerhub_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

var secrets = hubtest.Secrets

// encryptionConfig returns an EncryptionConfiguration with one entry: the
// resources named, with providers.
func encryptionConfig(resources, providers string) string {
	return "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [" + resources + "]\n  providers:\n" + providers
}

func aesgcmKey(t *testing.T, name string) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("  - aesgcm:\n      keys:\n      - name: %s\n        secret: %s\n", name, base64.StdEncoding.EncodeToString(k))
}

// loadTransformers loads config with k8s.io/apiserver's own loader, as
// cmd/informerhub loads --history-encryption-config.
func loadTransformers(t *testing.T, config string) value.ResourceTransformers {
	t.Helper()
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "test")
	if err != nil {
		t.Fatal(err)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers)
}

// logBuffer collects a hub's logs.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count counts the lines that hold s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// secretWithMarker is a Secret that holds marker in its data (base64 in
// its JSON) and, as it is, in a label.
func secretWithMarker(name, marker string) *corev1.Secret {
	return hubtest.Secret("ns", name, map[string]string{"marker": marker}, marker)
}

// Without an encryption of Secrets (no configuration, one that names
// other resource types only, or identity first for Secrets) the disk
// history never writes them: their feed keeps its history in memory, as
// without a disk, no file of the store holds their data, and the log says
// so once. Other types are written as before (a ConfigMap's marker, the
// control, is found).
func TestSecretsStayInMemoryWithoutTheirEncryption(t *testing.T) {
	for _, tt := range []struct {
		name   string
		config func(t *testing.T) string
	}{
		{"no configuration", func(*testing.T) string { return "" }},
		{"pods encrypted, secrets not named", func(t *testing.T) string { return encryptionConfig("pods", aesgcmKey(t, "key1")) }},
		{"identity first for secrets", func(t *testing.T) string {
			return encryptionConfig("secrets", "  - identity: {}\n"+aesgcmKey(t, "key1"))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t)
			c.ServeSecrets(t)
			dir := t.TempDir()
			var logs logBuffer
			cfg := informerhub.Config{HistoryStore: openStore(t, dir), Logger: logs.logger()}
			if config := tt.config(t); config != "" {
				cfg.HistoryTransformers = loadTransformers(t, config)
			}
			h := newHub(t, c, cfg)
			s := watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: secrets}})
			cms := watch(t, h, informerhub.WatchRequest{})
			marker, control := rand.Text(), rand.Text()
			c.Source(secrets).Add(secretWithMarker("a", marker))
			c.cms().Add(configMap("ns", "control", nil, control))
			if e := nextChange(t, s); !strings.Contains(e.Object, base64.StdEncoding.EncodeToString([]byte(marker))) {
				t.Fatalf("the Secret's event: %s", e.Object)
			}
			nextChange(t, cms)
			informerhub.ApplyRetention(h) // writes what the feeds recorded
			if informerhub.OnDisk(h, secrets) || !informerhub.OnDisk(h, configMaps) {
				t.Errorf("on disk: secrets %v, configmaps %v; want configmaps only", informerhub.OnDisk(h, secrets), informerhub.OnDisk(h, configMaps))
			}
			if found := hubtest.FilesHolding(t, dir, marker); len(found) > 0 {
				t.Errorf("%v hold the Secret's marker", found)
			}
			if found := hubtest.FilesHolding(t, dir, control); len(found) == 0 {
				t.Error("no file holds the ConfigMap's marker: the search finds nothing")
			}
			if n := logs.count("Secrets are not written to the history on disk"); n != 1 {
				t.Errorf("the log says %d times that Secrets stay in memory, want once", n)
			}
		})
	}
}

// With an encryption of Secrets, they are written encrypted, and resume
// across a restart exactly as other types do (TestTokensResumeFromTheDiskAcrossARestart):
// the events sent again are those sent live, tokens included, though the
// memory held only the newest few. No file of the store holds their data.
func TestEncryptedSecretsResumeFromTheDiskAcrossARestart(t *testing.T) {
	c := newFakeCluster(t)
	c.ServeSecrets(t)
	dir := t.TempDir()
	config := encryptionConfig("secrets", aesgcmKey(t, "key1"))
	cfg := informerhub.Config{HistoryStore: openStore(t, dir), HistorySize: 10, HistoryTransformers: loadTransformers(t, config)}
	h1 := newHub(t, c, cfg)
	req := informerhub.WatchRequest{Selector: informerhub.Selector{Resource: secrets}, IncludePrevious: true}
	s := watch(t, h1, req)
	marker := rand.Text()
	for i := range 40 {
		c.Source(secrets).Add(secretWithMarker(fmt.Sprint(i%15), fmt.Sprint(marker, i)))
	}
	c.Source(secrets).Delete(secretWithMarker("3", ""))
	live := nextSent(t, s, 41)
	if !informerhub.OnDisk(h1, secrets) {
		t.Fatal("the Secrets' feed does not write to the disk")
	}
	s.Close()
	h1.Close()
	if found := hubtest.FilesHolding(t, dir, marker); len(found) > 0 {
		t.Errorf("%v hold the Secrets' marker", found)
	}
	if found := hubtest.FilesHolding(t, dir, "k8s:enc:aesgcm:v1:key1:"); len(found) == 0 {
		t.Error("no file holds a value encrypted with key1")
	}

	c.Source(secrets).Add(secretWithMarker("down", marker+"down"))
	cfg.HistoryTransformers = loadTransformers(t, config) // the file, read again
	h2 := newHub(t, c, cfg)
	req.ResumeToken = live[4].Token
	s = watch(t, h2, req)
	got := nextSent(t, s, 37)
	if diff := cmp.Diff(live[5:], got[:36]); diff != "" {
		t.Errorf("events resumed from the disk differ from those sent live (-live +disk):\n%s", diff)
	}
	if !strings.Contains(got[36].Object, `"name":"down"`) || got[36].Type != informerhub.EventAdded || got[36].FromRelist {
		t.Errorf("after the disk: %+v, want the exact ADDED of the Secret created while the hub was down", got[36])
	}
	s.Close()
	h2.Close()
	if found := hubtest.FilesHolding(t, dir, marker); len(found) > 0 {
		t.Errorf("after the restart, %v hold the Secrets' marker", found)
	}
}

// A history on disk the configuration cannot read (its key removed) is a
// history that cannot be read: the feed starts the type over, as for a
// damaged disk (from memory; the next feed of the type writes it again
// with the new key), and its tokens resume from the API server; nothing
// panics, nothing is served wrong.
// Retention meanwhile leaves the unreadable type alone and goes on with
// the others.
func TestAHistoryTheConfigurationCannotReadStartsOver(t *testing.T) {
	c := newFakeCluster(t)
	c.ServeSecrets(t)
	store := openStore(t, t.TempDir())
	var logs logBuffer
	cfg := informerhub.Config{HistoryStore: store, Logger: logs.logger(), HistoryTransformers: loadTransformers(t, encryptionConfig("secrets", aesgcmKey(t, "key1")))}
	h1 := newHub(t, c, cfg)
	s := watch(t, h1, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: secrets}})
	for i := range 5 {
		c.Source(secrets).Add(secretWithMarker(fmt.Sprint(i), rand.Text()))
	}
	token := nextSent(t, s, 5)[2].Token
	s.Close()
	h1.Close()

	// The key is replaced, not rotated: retention cannot take the
	// Secrets' objects into their state, and leaves them.
	cfg.HistoryTransformers = loadTransformers(t, encryptionConfig("secrets", aesgcmKey(t, "key2")))
	cfg.HistoryRetention = time.Nanosecond
	h2 := newHub(t, c, cfg)
	cms := watch(t, h2, informerhub.WatchRequest{})
	for i := range 3 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	nextSent(t, cms, 3)
	informerhub.ApplyRetention(h2)
	if st := h2.Disk(); st.Failed || st.WriteErrors != 0 {
		t.Fatalf("Disk() = %+v: one type's unreadable history stopped the disk history", st)
	}
	if first, _ := informerhub.DiskWindow(h2, configMaps); first != 4 {
		t.Errorf("the ConfigMaps' disk history begins at %d after retention, want 4 (all cut)", first)
	}
	if logs.count("cannot apply retention to a resource type whose history on disk the encryption configuration cannot read") != 1 {
		t.Errorf("the log does not say once why retention leaves the Secrets:\n%s", logs.String())
	}

	c.Source(secrets).Add(secretWithMarker("after", rand.Text()))
	s = watch(t, h2, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: secrets}, ResumeToken: token})
	for _, want := range []string{`"name":"3"`, `"name":"4"`, `"name":"after"`} {
		if e := nextChange(t, s); !strings.Contains(e.Object, want) {
			t.Fatalf("resumed after the history started over: %s, want %s", e.Object, want)
		}
	}
	if logs.count("cannot read the history on disk; starting the resource type over") != 1 {
		t.Errorf("the log does not say the Secrets' history started over:\n%s", logs.String())
	}
	if st := h2.Disk(); st.Failed {
		t.Errorf("Disk() = %+v after the Secrets started over", st)
	}
}

// What the store holds of Secrets when they are no longer written (written
// encrypted before the configuration went; written as they are by a hub
// from before Secrets were kept off the disk) is deleted when the hub
// starts, before any feed, and the log says so.
func TestSecretsTheStoreHeldAreDeletedWhenNoLongerWritten(t *testing.T) {
	for _, tt := range []struct {
		name string
		fill func(t *testing.T, c *fakeCluster, store *historystore.Store)
	}{
		{"written encrypted", func(t *testing.T, c *fakeCluster, store *historystore.Store) {
			h := newHub(t, c, informerhub.Config{HistoryStore: store, HistoryTransformers: loadTransformers(t, encryptionConfig("secrets", aesgcmKey(t, "key1")))})
			s := watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: secrets}})
			c.Source(secrets).Add(secretWithMarker("a", rand.Text()))
			nextChange(t, s)
			h.Close()
		}},
		{"written as they are", func(t *testing.T, _ *fakeCluster, store *historystore.Store) {
			o := historystore.Object{Namespace: "ns", Name: "a", JSON: `{"data":{"v":"c2VjcmV0"}}`}
			if err := store.Append("secrets.v1", nil, historystore.Write{State: []historystore.Object{o}, Meta: &historystore.Meta{FirstSeq: 1}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeCluster(t)
			c.ServeSecrets(t)
			store := openStore(t, t.TempDir())
			tt.fill(t, c, store)
			if all, _ := store.Resources(); len(all) != 1 {
				t.Fatalf("the store holds %v, want the Secrets", all)
			}
			var logs logBuffer
			newHub(t, c, informerhub.Config{HistoryStore: store, Logger: logs.logger()})
			if all, err := store.Resources(); err != nil || len(all) != 0 {
				t.Errorf("after the hub started, the store holds %v, %v; want nothing", all, err)
			}
			if logs.count("deleting the history on disk of a resource type whose history now stays in memory") != 1 {
				t.Errorf("the log does not say the Secrets were deleted:\n%s", logs.String())
			}
		})
	}
}
