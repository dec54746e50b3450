package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

//go:embed dist
var dist embed.FS

// ContentSecurityPolicy is the policy of the console's responses: the page
// runs only the hub's own script and styles, talks only to the hub, and
// may not be framed.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// file is one file of the bundle.
type file struct {
	name        string
	content     []byte
	etag        string
	contentType string
}

// Handler serves the console: index.html at /, and the bundle's other
// files by name. Other paths are not found.
func Handler() http.Handler {
	files := make(map[string]*file)
	err := fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(content)
		name := path.Base(p)
		files["/"+name] = &file{name: name, content: content, etag: `"` + hex.EncodeToString(sum[:8]) + `"`,
			contentType: mime.TypeByExtension(path.Ext(name))}
		return nil
	})
	if err != nil {
		panic("console: the embedded bundle does not read: " + err.Error()) // cannot happen: it is compiled in
	}
	files["/"] = files["/index.html"]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := files[r.URL.Path]
		if f == nil {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache") // revalidated by ETag: a new hub may bring a new page
		h.Set("ETag", f.etag)
		if f.contentType != "" {
			h.Set("Content-Type", f.contentType)
		}
		http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.content))
	})
}
