package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/informerhub/informerhub/internal/testhub"
)

// setByTheChart are the hub's flags the chart sets from values of its own,
// beside config, with the values that make it set them: each also mounts
// or exposes what the flag names.
var setByTheChart = map[string][]string{
	"listen":                      {"ports.grpc=8443"},
	"metrics-listen":              {"ports.metrics=9090"},
	"tls-cert":                    {"tls.enabled=true"},
	"tls-key":                     {"tls.enabled=true"},
	"client-ca":                   {"config.auth=mtls", "tls.clientCA.secretName=ca"},
	"history-dir":                 {"durableHistory.enabled=true"},
	"history-retention":           {"durableHistory.enabled=true", "durableHistory.retention=48h"},
	"history-disk-bytes":          {"durableHistory.enabled=true", "durableHistory.diskBytes=1000000"},
	"history-max-unwritten-bytes": {"durableHistory.enabled=true", "durableHistory.maxUnwrittenBytes=1000000"},
	"history-encryption-config":   {"durableHistory.enabled=true", "durableHistory.encryptionConfig.secretName=keys"},
}

// notReachable are the hub's flags no value sets, and why.
var notReachable = map[string]string{
	"kubeconfig":            "in a pod the hub uses its service account (in-cluster configuration)",
	"version":               "prints the version and exits: a command, not a setting",
	"insecure-allow-remote": "deprecated: config.insecureAllowRemoteUnauthenticated, ...Plaintext and ...Debug say each",
}

// hubFlags returns the flags the hub's --help lists, each with its type
// (bool, duration, int, uint, float, string, value) and default ("" when
// none).
func hubFlags(t *testing.T) map[string][2]string {
	t.Helper()
	// flag's --help exits 2 (ErrHelp): the output is what counts.
	out, _ := exec.Command(testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub"), "--help").CombinedOutput()
	flags := map[string][2]string{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)(?: (\w+))?\n((?:\s+\t.*\n?)+)`).FindAllStringSubmatch(string(out), -1) {
		typ := m[2]
		if typ == "" {
			typ = "bool"
		}
		def := ""
		if d := regexp.MustCompile(`\(default (.*)\)\s*$`).FindStringSubmatch(m[3]); d != nil {
			def = strings.Trim(d[1], `"`)
		}
		flags[m[1]] = [2]string{typ, def}
	}
	if len(flags) < 50 {
		t.Fatalf("--help listed %d flags: not the usual output\n%s", len(flags), out)
	}
	return flags
}

// camel is a flag's key in config: history-size is historySize.
func camel(flag string) string {
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		parts[i] = string(unicode.ToUpper(rune(parts[i][0]))) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// chartValues reads the chart's values.yaml and values.schema.json.
func chartValues(t *testing.T) (values map[string]any, schema map[string]any) {
	t.Helper()
	for file, into := range map[string]*map[string]any{"values.yaml": &values, "values.schema.json": &schema} {
		data, err := os.ReadFile(filepath.Join(chartDir(t), file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	return values, schema
}

// Every flag of the hub that an operator sets is reachable from the
// chart's values: as config.<camelCase> (listed in values.yaml, typed in
// values.schema.json as the flag is), or from values of the chart's own
// (setByTheChart); the rest are listed, with why, in notReachable. A flag
// added to the hub fails here until the chart has it.
func TestEveryFlagIsReachableFromValues(t *testing.T) {
	flags := hubFlags(t)
	values, schema := chartValues(t)
	config, _ := values["config"].(map[string]any)
	configSchema := schema["properties"].(map[string]any)["config"].(map[string]any)["properties"].(map[string]any)

	var keys, schemaKeys []string
	for k := range config {
		keys = append(keys, k)
	}
	for k := range configSchema {
		schemaKeys = append(schemaKeys, k)
	}
	slices.Sort(keys)
	slices.Sort(schemaKeys)
	if !slices.Equal(keys, schemaKeys) {
		t.Errorf("values.yaml's config has %v; values.schema.json's, %v", keys, schemaKeys)
	}
	// What JSON schema type each flag type takes.
	schemaType := map[string]string{"bool": "boolean", "duration": "string", "int": "integer", "uint": "integer", "float": "number", "string": "string"}
	for flag, info := range flags {
		key := camel(flag)
		_, inConfig := configSchema[key]
		_, byChart := setByTheChart[flag]
		_, not := notReachable[flag]
		if n := btoi(inConfig) + btoi(byChart) + btoi(not); n != 1 {
			t.Errorf("--%s is in config (%v), set by the chart (%v) and not reachable (%v): want exactly one", flag, inConfig, byChart, not)
			continue
		}
		if !inConfig {
			continue
		}
		types := fmt.Sprint(configSchema[key].(map[string]any)["type"])
		if want, ok := schemaType[info[0]]; ok && !strings.Contains(types, want) {
			t.Errorf("config.%s is typed %s in values.schema.json; --%s is a %s flag (%s)", key, types, flag, info[0], want)
		}
	}
	for _, k := range keys {
		if _, ok := flags[kebab(k)]; !ok {
			t.Errorf("config.%s is no flag of the hub (--%s)", k, kebab(k))
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// kebab is a config key's flag: historySize is history-size.
func kebab(key string) string {
	var b strings.Builder
	for _, r := range key {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// Set, every config key and every value of setByTheChart reaches the hub
// as its flag, with its value; and the hub accepts the arguments as they
// are (its --version checks them). Twice: with Kubernetes authentication
// and the history on disk, and with mTLS (--client-ca; --token-audience
// is for kubernetes only, and left out).
func TestEveryValueReachesItsFlag(t *testing.T) {
	flags := hubFlags(t)
	values, _ := chartValues(t)
	config := values["config"].(map[string]any)
	// Values of the flags without a default, that the hub accepts together.
	samples := map[string]any{
		"console": true, "cors-allowed-origins": []string{"https://portal.example.com", "https://b.example.com"}, "debug-listen": "127.0.0.1:6060",
		"insecure-allow-remote-debug": true, "insecure-allow-remote-plaintext": true, "insecure-allow-remote-unauthenticated": true,
		"retain": "configmaps,deployments.apps", "strip-managed-fields": true, "upstream-compression": true, "token-audience": "informerhub",
		"log-level": "debug", "auth": "kubernetes", "max-concurrent-streams": int64(100),
	}
	set := map[string]any{}
	want := map[string]string{}
	for key := range config {
		flag := kebab(key)
		info := flags[flag]
		v, ok := samples[flag]
		switch {
		case ok:
		case info[1] == "":
			t.Fatalf("--%s has no default: add a sample value of it", flag)
		case info[0] == "int" || info[0] == "uint":
			n, err := strconv.ParseInt(info[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			v = n
		case info[0] == "float":
			f, err := strconv.ParseFloat(info[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			v = f
		default:
			v = info[1]
		}
		set[key] = v
		switch v := v.(type) {
		case []string:
			want[flag] = strings.Join(v, ",")
		default:
			want[flag] = fmt.Sprint(v)
		}
	}
	for _, tt := range []struct {
		name  string
		auth  string
		other []string
	}{
		{"kubernetes and durable history", "kubernetes", []string{"listen", "metrics-listen", "tls-cert", "tls-key", "history-dir", "history-retention",
			"history-disk-bytes", "history-max-unwritten-bytes", "history-encryption-config"}},
		{"mtls", "mtls", []string{"listen", "metrics-listen", "tls-cert", "tls-key", "client-ca"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := map[string]any{}
			for k, v := range set {
				cfg[k] = v
			}
			cfg["auth"] = tt.auth
			data, err := json.Marshal(map[string]any{"config": cfg})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "values.json")
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"-f", file}
			for _, flag := range tt.other {
				for _, v := range setByTheChart[flag] {
					args = append(args, "--set", v)
				}
			}
			_, objs := mustTemplate(t, args...)
			var d appsv1.Deployment
			var s appsv1.StatefulSet
			var hubArgs []string
			if tt.auth == "kubernetes" {
				fromUnstructured(t, only(t, objs, "StatefulSet"), &s)
				hubArgs = s.Spec.Template.Spec.Containers[0].Args
			} else {
				fromUnstructured(t, only(t, objs, "Deployment"), &d)
				hubArgs = d.Spec.Template.Spec.Containers[0].Args
			}
			got := map[string]string{}
			for _, arg := range hubArgs {
				name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
				if _, dup := got[name]; dup {
					t.Errorf("--%s twice", name)
				}
				got[name] = value
			}
			for flag, value := range want {
				switch {
				case flag == "token-audience" && tt.auth != "kubernetes":
					if _, ok := got[flag]; ok {
						t.Errorf("--token-audience with --auth=%s, which the hub refuses", tt.auth)
					}
				case flag == "auth":
					if got[flag] != tt.auth {
						t.Errorf("--auth=%s, want %s", got[flag], tt.auth)
					}
				case got[flag] != value:
					t.Errorf("config.%s=%s renders --%s=%q, want %q", camel(flag), value, flag, got[flag], value)
				}
			}
			for _, flag := range tt.other {
				if _, ok := got[flag]; !ok {
					t.Errorf("%v renders no --%s", setByTheChart[flag], flag)
				}
			}
			bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub")
			if out, err := exec.CommandContext(ctxFor(t), bin, append(hubArgs, "--version")...).CombinedOutput(); err != nil {
				t.Fatalf("informerhub %s: %v\n%s", strings.Join(hubArgs, " "), err, out)
			}
		})
	}
}

// The hub accepts each mode's arguments as they are.
func TestEachModesFlagsAreValid(t *testing.T) {
	bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, objs := mustTemplate(t, valuesArgs(t, m.values)...)
			var args []string
			for _, obj := range objs {
				if isExport(obj) {
					continue // informerhub-export's Deployment (export_test.go)
				}
				switch obj.GetKind() {
				case "Deployment":
					var d appsv1.Deployment
					fromUnstructured(t, obj, &d)
					args = d.Spec.Template.Spec.Containers[0].Args
				case "StatefulSet":
					var s appsv1.StatefulSet
					fromUnstructured(t, obj, &s)
					args = s.Spec.Template.Spec.Containers[0].Args
				}
			}
			if out, err := exec.CommandContext(ctxFor(t), bin, append(args, "--version")...).CombinedOutput(); err != nil {
				t.Fatalf("informerhub %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}
