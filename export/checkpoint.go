package export

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileCheckpoint keeps a route's resume point in a file (on a volume of
// its own), for sinks that cannot keep it with the changes: written to a
// temporary file, synced, and renamed over the old one, so that a crash
// leaves one or the other, whole.
type FileCheckpoint struct {
	Path string
}

// Load returns the token saved last; "" when none was.
func (c FileCheckpoint) Load() (string, error) {
	data, err := os.ReadFile(c.Path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("export: reading the checkpoint: %w", err)
	}
	return string(data), nil
}

// Save saves token.
func (c FileCheckpoint) Save(token string) error {
	tmp, err := os.CreateTemp(filepath.Dir(c.Path), filepath.Base(c.Path)+".*")
	if err != nil {
		return fmt.Errorf("export: writing the checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // once renamed, nothing
	if _, err := tmp.WriteString(token); err != nil {
		tmp.Close()
		return fmt.Errorf("export: writing the checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("export: writing the checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("export: writing the checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.Path); err != nil {
		return fmt.Errorf("export: writing the checkpoint: %w", err)
	}
	// The rename is durable once the directory is.
	if dir, err := os.Open(filepath.Dir(c.Path)); err == nil {
		defer dir.Close()
		if err := dir.Sync(); err != nil {
			return fmt.Errorf("export: writing the checkpoint: %w", err)
		}
	}
	return nil
}
