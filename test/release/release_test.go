// Package release tests that the Go SDK can be used from outside the
// repository: today, with the go.mod clients/go's README gives; and once a
// release is tagged by tools/release.sh (make release), with `go get`.
package release

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

const (
	sdk = "github.com/informerhub/informerhub/clients/go"
	gen = "github.com/informerhub/informerhub/gen"
)

// program is what a newcomer writes first: a client, and a watch.
const program = `package main

import (
	"context"
	"fmt"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func main() {
	client, err := hubclient.New([]string{"localhost:8080"}, hubclient.WithInsecure(), hubclient.WithTokenFile(".cache/run/token"))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	w := client.Watch(context.Background(), hubclient.Selector{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}, hubclient.WatchOptions{})
	fmt.Println(w != nil)
}
`

// repoRoot is the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// run runs a command in dir, failing the test with its output if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out.String())
	}
	return out.String()
}

// consumer makes a module outside the repository with program as its main
// package and goMod as its go.mod.
func consumer(t *testing.T, goMod string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTheReadmesGoModBuilds builds a program outside the repository with the
// go.mod that clients/go's README gives for using the SDK from a clone.
func TestTheReadmesGoModBuilds(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "clients", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The README's block that starts with "module example.com/...".
	_, block, ok := strings.Cut(string(readme), "```\nmodule ")
	if !ok {
		t.Fatal("clients/go/README.md has no go.mod block (```, then module ...)")
	}
	block, _, _ = strings.Cut(block, "```")
	goMod := "module " + strings.ReplaceAll(block, "/path/to/informerhub", root)
	dir := consumer(t, goMod)
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, dir, env, "go", "mod", "tidy")
	run(t, dir, env, "go", "build", "-o", os.DevNull, ".")
}

// TestAReleaseCanBeFetchedWithGoGet tags a release in a copy of the
// repository with tools/release.sh, checks that the repository's own
// module still loads, serves the tagged gen and clients/go from a module
// proxy in a directory (as proxy.golang.org would serve them from the
// pushed tags), and builds a program outside the repository that requires
// only clients/go at that version.
func TestAReleaseCanBeFetchedWithGoGet(t *testing.T) {
	root := repoRoot(t)
	repo := t.TempDir()
	// The repository's files as they are here, in a repository of their own.
	run(t, root, nil, "sh", "-c", "git ls-files -z | xargs -0 cp --parents -t '"+repo+"'")
	git := []string{"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com"}
	run(t, repo, git, "git", "init", "-q")
	run(t, repo, git, "git", "add", "-A")
	run(t, repo, git, "git", "commit", "-q", "-m", "informerhub")
	const version = "v0.1.0"
	// buf is not needed: the released API is the committed one.
	run(t, repo, append(git, "BUF=true"), "tools/release.sh", version)
	if out := run(t, repo, nil, "git", "tag", "--list"); out != "clients/go/"+version+"\ngen/"+version+"\n"+version+"\n" {
		t.Fatalf("tags after the release:\n%s", out)
	}
	if out := run(t, repo, nil, "git", "show", "clients/go/"+version+":clients/go/go.mod"); !strings.Contains(out, gen+" "+version) {
		t.Fatalf("clients/go's go.mod at its tag does not require gen %s:\n%s", version, out)
	}
	// The tagged repository still builds from its own tree (its replace
	// directives), with go.mod as it is: -mod=readonly.
	run(t, repo, []string{"GOFLAGS=-mod=readonly", "GOWORK=off"}, "go", "list", "-deps", "./...")
	run(t, filepath.Join(repo, "clients", "go"), []string{"GOFLAGS=-mod=readonly", "GOWORK=off"}, "go", "list", "-deps", "./...")
	for _, bad := range []string{"v2.0.0", "0.1.0", "v0.1"} {
		cmd := exec.Command("tools/release.sh", bad)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "usage:") {
			t.Errorf("a release %q: %v\n%s", bad, err, out)
		}
	}
	// Running it again refuses: the tags exist.
	cmd := exec.Command("tools/release.sh", version)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "exists already") {
		t.Fatalf("a second release of %s: %v\n%s", version, err, out)
	}

	proxy := t.TempDir()
	for _, m := range []struct{ path, subdir string }{{gen, "gen"}, {sdk, "clients/go"}} {
		serve(t, repo, proxy, m.path, m.subdir, version)
	}
	dir := consumer(t, "module example.com/newcomer\n\ngo 1.26.0\n")
	env := []string{
		"GOFLAGS=-mod=mod", "GOWORK=off",
		// The tagged modules from the directory; the rest as usual.
		"GOPROXY=file://" + proxy + "," + goEnv(t, "GOPROXY"),
		"GONOSUMDB=github.com/informerhub",
	}
	run(t, dir, env, "go", "get", sdk+"@"+version)
	run(t, dir, env, "go", "mod", "tidy")
	run(t, dir, env, "go", "build", "-o", os.DevNull, ".")
	if out := run(t, dir, env, "go", "list", "-m", gen); strings.TrimSpace(out) != gen+" "+version {
		t.Fatalf("the program builds with %q, want gen %s", out, version)
	}
}

// serve writes module path at version, from subdir of repo at the tag
// subdir/version, into a GOPROXY directory.
func serve(t *testing.T, repo, proxy, path, subdir, version string) {
	t.Helper()
	escaped, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(proxy, escaped, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := subdir + "/" + version
	var z bytes.Buffer
	if err := zip.CreateFromVCS(&z, module.Version{Path: path, Version: version}, repo, tag, subdir); err != nil {
		t.Fatalf("zipping %s@%s: %v", path, version, err)
	}
	goMod := run(t, repo, nil, "git", "show", tag+":"+subdir+"/go.mod")
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, content := range map[string][]byte{
		"list": []byte(version + "\n"), version + ".info": info, version + ".mod": []byte(goMod), version + ".zip": z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
