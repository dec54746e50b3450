package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/informerhub/informerhub/internal/testhub"
)

// otherCommandsFlags are the flags the docs name of commands other than
// the hub and hubctl, with the command, so that a flag the hub drops is
// never mistaken for one of theirs.
var otherCommandsFlags = map[string]string{
	"all":                        "kubectl delete",
	"build-arg":                  "docker build",
	"cacert":                     "curl",
	"cert":                       "kubectl create secret tls",
	"create":                     "kafka-topics.sh",
	"data-binary":                "curl",
	"encryption-provider-config": "kube-apiserver",
	"set":                        "helm install",
	"strict":                     "helm lint",
	"http2-prior-knowledge":      "curl, buf curl",
	"key":                        "kubectl create secret tls",
	"no-buffer":                  "curl",
	"overwrite":                  "kubectl label",
	"partitions":                 "kafka-topics.sh",
	"protocol":                   "buf curl",
	"raw":                        "kubectl get",
	"timeout":                    "buf curl",
	"topic":                      "kafka-topics.sh",
}

// TestDocumentedFlagsExist checks that every --flag the README and docs/
// name is one the hub, hubctl or informerhub-export lists in its --help (or one of another
// command's, above), and that docs/operations.md's table of flags lists
// exactly the hub's: a flag renamed or removed, or added without a word,
// fails here.
func TestDocumentedFlagsExist(t *testing.T) {
	hub := helpFlags(t, testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub"))
	hubctlPath := testhub.Build(t, "github.com/informerhub/informerhub/cmd/hubctl")
	hubctl := helpFlags(t, hubctlPath)
	for _, command := range []string{"watch", "snapshot", "count", "resources"} {
		hubctl = append(hubctl, helpFlags(t, hubctlPath, command)...)
	}
	// informerhub-export's few flags count as hubctl's: the docs name
	// them of one command or the other.
	hubctl = append(hubctl, helpFlags(t, testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub-export"))...)
	if len(hub) < 20 || len(hubctl) < 10 {
		t.Fatalf("--help listed %d flags of the hub and %d of hubctl: not the usual output", len(hub), len(hubctl))
	}

	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	mention := regexp.MustCompile(`--([a-z][a-z0-9-]+)`)
	for _, doc := range append(docs, "../../README.md") {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mention.FindAllStringSubmatch(string(text), -1) {
			flag := m[1]
			if !slices.Contains(hub, flag) && !slices.Contains(hubctl, flag) && otherCommandsFlags[flag] == "" {
				t.Errorf("%s names --%s, which neither the hub's nor hubctl's --help lists", filepath.Base(doc), flag)
			}
		}
	}

	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	table := string(ops)[strings.Index(string(ops), "## Flags"):]
	var documented []string
	for _, row := range regexp.MustCompile("(?m)^\\| (`--[a-z0-9-]+`(?:, `--[a-z0-9-]+`)*) \\|").FindAllStringSubmatch(table, -1) {
		for _, m := range mention.FindAllStringSubmatch(row[1], -1) {
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)
	if !slices.Equal(documented, hub) {
		t.Errorf("docs/operations.md's table of flags lists %q; the hub's --help, %q", documented, hub)
	}
}

// helpFlags returns the flags that a command's --help lists, sorted.
func helpFlags(t *testing.T, binary string, args ...string) []string {
	t.Helper()
	// flag's --help exits 0 (hubctl) or 2 (a FlagSet that returns
	// ErrHelp): the output is what counts.
	out, _ := exec.Command(binary, append(args, "--help")...).CombinedOutput()
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	slices.Sort(flags)
	return slices.Compact(flags)
}
