package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// loadHistoryEncryption reads --history-encryption-config, an
// EncryptionConfiguration (apiserver.config.k8s.io/v1) as the API server
// reads its --encryption-provider-config: with k8s.io/apiserver's own
// loader, which validates it and builds each resource's providers (aesgcm,
// aescbc, secretbox, KMS v2, identity). It is read once: a changed file
// takes effect at the next start. ctx bounds what KMS v2 providers run in
// the background; end it once the hub has closed.
func loadHistoryEncryption(ctx context.Context, path string, log *slog.Logger) (value.ResourceTransformers, error) {
	loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "informerhub")
	if err != nil {
		return nil, fmt.Errorf("--history-encryption-config: %w", err)
	}
	var resources []string
	for gr := range loaded.Transformers {
		resources = append(resources, gr.String())
	}
	slices.Sort(resources)
	// The file's hash, never its keys.
	log.Info("encrypting the history on disk", "config", path, "hash", loaded.EncryptionFileContentHash, "resources", resources)
	return encryptionconfig.StaticTransformers(loaded.Transformers), nil
}
