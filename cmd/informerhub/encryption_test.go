package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"
)

func writeEncryptionConfig(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n" +
		"  - aesgcm:\n      keys:\n      - name: key1\n        secret: " + secret + "\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --history-encryption-config goes with --history-dir, and is read with
// the API server's own loader: Secrets get its aesgcm provider, a type it
// does not name identity; a file that does not load stops the hub before
// it touches the directory, naming the flag.
func TestHistoryEncryptionConfig(t *testing.T) {
	if _, err := parseFlags([]string{"--history-encryption-config", "x.yaml"}); err == nil {
		t.Error("--history-encryption-config without --history-dir was accepted")
	}
	if _, err := parseFlags([]string{"--history-encryption-config", "x.yaml", "--history-dir", t.TempDir()}); err != nil {
		t.Error(err)
	}

	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	transformers, err := loadHistoryEncryption(ctx, writeEncryptionConfig(t, base64.StdEncoding.EncodeToString(key)), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for gr, want := range map[schema.GroupResource]string{{Resource: "secrets"}: "k8s:enc:aesgcm:v1:key1:", {Resource: "configmaps"}: "plain"} {
		out, err := transformers.TransformerForResource(gr).TransformToStorage(ctx, []byte("plain"), value.DefaultContext("key"))
		if err != nil || !bytes.HasPrefix(out, []byte(want)) {
			t.Errorf("%s is written as %q, %v; want it to start with %q", gr, out, err, want)
		}
	}

	dir := filepath.Join(t.TempDir(), "history")
	short := writeEncryptionConfig(t, base64.StdEncoding.EncodeToString(key[:5])) // not an AES key
	for _, path := range []string{short, filepath.Join(t.TempDir(), "missing.yaml")} {
		o, err := parseFlags([]string{"--kubeconfig", kubeconfig(t), "--auth=none", "--history-dir", dir, "--history-encryption-config", path})
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		err = run(context.Background(), o, slog.New(slog.DiscardHandler), listeners{grpc: lis})
		lis.Close()
		if err == nil || !strings.Contains(err.Error(), "--history-encryption-config") {
			t.Errorf("run with %s: %v, want an error naming --history-encryption-config", filepath.Base(path), err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the history directory exists after a configuration that did not load: %v", err)
		}
	}
}
