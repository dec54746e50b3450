// Command hubctl reads Kubernetes objects through an informerhub: `kubectl get
// -w` for the hub.
//
//	hubctl [--hub ADDR[,ADDR...]] [--insecure | --ca-file F] [--token-file F | --cert-file F --key-file F] COMMAND [flags] [RESOURCE]
//
//	hubctl watch cm -n demo                    initial objects, then every change
//	hubctl watch configmaps,secrets -n demo    several types on one stream (WatchMany)
//	hubctl watch deploy -A -l app=web          every namespace
//	hubctl watch pods --field-selector spec.nodeName=node-1 --field status.phase --include-previous
//	hubctl watch configmaps --filter 'has(object.data.mode) && object.data.mode == "debug"'
//	hubctl snapshot configmaps -n demo -o json    a Kubernetes List, with its resumeToken
//	hubctl snapshot cm -w                      the objects, then every change after them
//	hubctl count pods --by status.phase -w     live counts per phase
//	hubctl resources -o wide                   with the fields each type can be selected by
//
// On Ctrl-C, watch prints the resume token to continue from, to stderr.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub/projection"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, time.Now))
}

const usage = `hubctl reads Kubernetes objects through an informerhub.

Usage:
  hubctl [global flags] watch RESOURCE [flags]     initial objects, then every change
  hubctl [global flags] snapshot RESOURCE [flags]  the objects of one point in time
  hubctl [global flags] count RESOURCE [flags]     how many objects, per group (--by), live with -w
  hubctl [global flags] verify RESOURCE [flags]    check a copy of the objects against the hub's digest, kept up with -w
  hubctl [global flags] resources [flags]          the resource types you may watch

RESOURCE is a resource type as kubectl takes it: its plural, singular or short
name, or its kind (configmaps, configmap, cm, ConfigMap), with an optional
version and group (deployments.apps, deploy.v1.apps). Without a version, the
newest one the cluster serves is used. watch takes several, comma-separated
(configmaps,secrets): one stream of them all, with the same flags for each.

The namespace is the kubeconfig's, as kubectl's ($KUBECONFIG, else
~/.kube/config; "default" without one): -n NAMESPACE for another, -A for
every namespace (whose tables, as kubectl's, add a NAMESPACE column).

Examples:
  hubctl watch cm -n demo -l app=web
  hubctl watch configmaps,secrets -n demo
  hubctl watch pods -A --field-selector spec.nodeName=node-1 --field status.phase --include-previous
  hubctl watch configmaps --filter 'has(object.data.mode) && object.data.mode == "debug"'
  hubctl snapshot pods --field metadata.labels --field status.phase -o yaml
  hubctl snapshot cm -n demo -o json | jq '.items[].metadata.name'
  hubctl snapshot cm -n demo -w     the objects, then every change after them
  hubctl count pods --by status.phase -w
  hubctl verify cm -n demo -w --interval 1m   a snapshot kept up by a watch, checked every minute
  hubctl resources -o wide     the fields each type can be selected by

Output is kubectl get's: a table with columns as wide as their widest value
(a watch aligns its initial objects together, then prints each change at
once in the same columns), a value cut at a line break ("...") and ESC
shown as ^[, as kubectl shows them; "No resources found" on stderr when
there are none; -o yaml and -o json without metadata.managedFields unless
--show-managed-fields (or a --field naming them), YAML documents separated
by --- (a snapshot is one: a List).

"hubctl COMMAND -h" describes a command's flags.

Global flags:
`

// sdkReconnected is the message the SDK logs, at info, when a stream is
// up again after failed attempts (clients/go's reconnection.established).
const sdkReconnected = "reconnected to the hub"

// sdkLogger is the SDK's logger: its warnings (each failed attempt to
// reach the hub, with its number), and of its info lines the one that
// says the hub was reached again, which the warnings would otherwise
// leave untold. Its other info lines stay out: an interrupted stream
// that resumes at once loses nothing, and hubctl says itself when the hub
// re-synced a watch.
func sdkLogger(stderr io.Writer) *slog.Logger {
	return slog.New(sdkLogHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})})
}

type sdkLogHandler struct{ slog.Handler }

func (h sdkLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && r.Message != sdkReconnected {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h sdkLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.Handler.WithGroup(name)}
}

// transport returns the SDK option for how to reach the hub: plaintext,
// or TLS verified with caFile (default: the system's roots), presenting
// the client certificate in certFile and keyFile if given. Nil means the
// SDK's default (TLS with the system's roots).
func transport(insecure bool, caFile, certFile, keyFile string) (hubclient.Option, error) {
	switch {
	case insecure && (caFile != "" || certFile != ""):
		return nil, errors.New("--insecure contradicts --ca-file and --cert-file: TLS is either off or on")
	case (certFile == "") != (keyFile == ""):
		return nil, errors.New("--cert-file and --key-file go together")
	case insecure:
		return hubclient.WithInsecure(), nil
	case caFile == "" && certFile == "":
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificates in %s", caFile)
		}
	}
	if certFile != "" {
		// Check the pair now, for a clear error; load it again at every
		// handshake, so a watch that runs for days follows a rotated
		// certificate.
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			return &cert, nil
		}
	}
	return hubclient.WithTLS(cfg), nil
}

// cli is one run of the command.
type cli struct {
	stdout, stderr io.Writer
	now            func() time.Time
	client         *hubclient.Client
	// served is every resource type the cluster serves, as ListResources
	// gave it with IncludeForbidden; nil until a name needs resolving.
	served []hubclient.Resource
	// defaultNamespace is the namespace of the kubeconfig's context, as
	// kubectl uses it; "default" without one.
	defaultNamespace func(warn io.Writer) string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	global := flag.NewFlagSet("hubctl", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() {
		fmt.Fprint(stderr, usage)
		global.PrintDefaults()
	}
	hubs := global.String("hub", envOr("INFORMERHUB_ADDRESS", "127.0.0.1:8080"), "hub replicas, comma-separated (default $INFORMERHUB_ADDRESS)")
	insecure := global.Bool("insecure", false, "connect without TLS (a hub on loopback or a trusted network)")
	caFile := global.String("ca-file", "", "CA certificates to verify the hub with (default: the system's)")
	tokenFile := global.String("token-file", "", "file holding a bearer token, re-read for every call")
	certFile := global.String("cert-file", "", "client certificate (PEM) for a hub that authenticates with mTLS, re-read for every connection")
	keyFile := global.String("key-file", "", "the private key of --cert-file (PEM)")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if global.NArg() == 0 {
		global.Usage()
		return 2
	}
	// The SDK logs reconnections and re-syncs; they belong on stderr.
	opts := []hubclient.Option{hubclient.WithLogger(sdkLogger(stderr))}
	tlsOpt, err := transport(*insecure, *caFile, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "hubctl:", err)
		return 2
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	if *tokenFile != "" {
		// Checked once here, for a clear word: the SDK reads it at every
		// call, a rotated token included.
		if b, err := os.ReadFile(*tokenFile); err != nil {
			fmt.Fprintln(stderr, "hubctl: --token-file:", err)
			return 2
		} else if len(strings.TrimSpace(string(b))) == 0 {
			fmt.Fprintf(stderr, "hubctl: --token-file %s is empty: write a token there (kubectl create token NAME > %s)\n", *tokenFile, *tokenFile)
			return 2
		}
		opts = append(opts, hubclient.WithTokenFile(*tokenFile))
	}
	var endpoints []string
	for _, h := range strings.Split(*hubs, ",") {
		if h = strings.TrimSpace(h); h != "" {
			endpoints = append(endpoints, h)
		}
	}
	client, err := hubclient.New(endpoints, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "hubctl:", err)
		return 2
	}
	defer client.Close()
	c := &cli{stdout: stdout, stderr: stderr, now: now, client: client, defaultNamespace: kubeconfigNamespace}

	command, rest := global.Arg(0), global.Args()[1:]
	switch command {
	case "watch", "snapshot", "count", "verify":
		err = c.objects(ctx, command, rest)
	case "resources":
		err = c.resources(ctx, rest)
	default:
		fmt.Fprintf(stderr, "hubctl: unknown command %q\n\n", command)
		global.Usage()
		return 2
	}
	var usageErr usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintln(stderr, "hubctl:", err)
		return 2
	case ctx.Err() != nil:
		return 0 // Ctrl-C, whatever the call was doing
	}
	printError(stderr, err)
	if hint := hintFor(err, *tokenFile != "", *certFile != "", *insecure, endpoints); hint != "" {
		fmt.Fprintln(stderr, "hubctl:", hint)
	}
	return 1
}

// printError prints the error a command ended with. Its message may quote
// what a tenant wrote (a name, a key the filter did not find): terminal
// escapes are escaped; its lines are kept, for a CEL expression and its
// carets.
func printError(stderr io.Writer, err error) {
	if st, ok := status.FromError(err); ok && st.Err().Error() == err.Error() {
		fmt.Fprintf(stderr, "hubctl: %s: %s\n", st.Code(), escapeTerminal(st.Message()))
	} else {
		fmt.Fprintln(stderr, "hubctl:", escapeTerminal(err.Error())) // a status wrapped with context
	}
}

// hintFor says what to do about an error whose cause a newcomer would not
// guess: the wrong transport, no token, no hub.
func hintFor(err error, token, cert, insecure bool, endpoints []string) string {
	msg := err.Error()
	hub := strings.Join(endpoints, ",")
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("the hub at %s speaks plaintext, not TLS: add --insecure (as for make run's hub)", hub)
	case insecure && (strings.Contains(msg, "error reading server preface") || strings.Contains(msg, "frame too large")):
		return fmt.Sprintf("the hub at %s may want TLS: drop --insecure (and give --ca-file if its certificate is not from a public CA)", hub)
	case strings.Contains(msg, "connection refused"):
		return fmt.Sprintf("nothing listens at %s: is the hub running (make run)? Set its address with --hub or $INFORMERHUB_ADDRESS", hub)
	}
	if status.Code(err) == codes.Unauthenticated && !strings.Contains(msg, "hubclient:") { // the SDK's own words need none
		switch {
		case token:
			return "the hub refused the token of --token-file: it may have expired, or be for another cluster (kubectl create token NAME makes a new one)"
		case cert:
			return "the hub did not accept the client certificate of --cert-file, or wants a bearer token (--token-file FILE)"
		default:
			return "the hub wants a bearer token: give --token-file FILE (make run writes .cache/run/token; in a cluster, a service account token such as kubectl create token NAME writes)"
		}
	}
	return ""
}

type usageError struct{ error }

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// objects runs watch, snapshot, count and verify.
func (c *cli) objects(ctx context.Context, command string, args []string) error {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var sel hubclient.Selector
	var output, resumeToken, group, versionFlag, resourceFlag string
	var fields fieldList
	var watchOnly, showPrevious, allNamespaces, follow, showManagedFields bool
	namespace := optionalString{}
	fs.Var(&namespace, "namespace", "the namespace (default: the kubeconfig's, as kubectl's; \"default\" without one)")
	fs.Var(&namespace, "n", "shorthand for --namespace")
	fs.BoolVar(&allNamespaces, "all-namespaces", false, "every namespace")
	fs.BoolVar(&allNamespaces, "A", false, "shorthand for --all-namespaces")
	fs.StringVar(&sel.LabelSelector, "selector", "", "a label selector, e.g. app=web")
	fs.StringVar(&sel.LabelSelector, "l", "", "shorthand for --selector")
	fs.StringVar(&sel.FieldSelector, "field-selector", "",
		"a field selector, e.g. spec.nodeName=node-1,status.phase!=Succeeded for pods: any field the resource type supports, with =, == and != (hubctl resources -o wide lists them)")
	fs.StringVar(&sel.Filter, "filter", "",
		"a CEL `expression` over object, Kubernetes' dialect: only the objects it is true for, e.g. 'object.status.phase == \"Running\"'")
	fs.StringVar(&sel.ShardSelector, "shard", "",
		"a Kubernetes shard `selector`, as sharded controllers use: only the objects whose uid's (or namespace's) hash is in its ranges, e.g. \"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')\"")
	fs.Var(&fields, "field",
		"only this `path` of each object, e.g. status.phase or metadata.labels[\"app.kubernetes.io/name\"] (with apiVersion, kind and metadata name, namespace, uid and resourceVersion); repeat it, or give several comma-separated; a watch then shows only the changes of these")
	fs.Var(&fields, "fields", "the same as --field")
	fs.StringVar(&output, "output", "", "output format: empty for a table; json or yaml (a watch: one event each, YAML's separated by ---; a snapshot: a Kubernetes List)")
	fs.StringVar(&output, "o", "", "shorthand for --output")
	fs.StringVar(&group, "group", "", "the API group (instead of RESOURCE)")
	fs.StringVar(&versionFlag, "version", "", "the API version")
	fs.StringVar(&resourceFlag, "resource", "", "the plural resource name (instead of RESOURCE)")
	var groupBy string
	var interval time.Duration
	switch command {
	case "verify":
		fs.BoolVar(&follow, "watch", false, "keep the copy up with a watch from its snapshot, and compare it again every --interval, until interrupted")
		fs.BoolVar(&follow, "w", false, "shorthand for --watch")
		fs.DurationVar(&interval, "interval", 30*time.Second, "with --watch, how often to compare")
	case "count":
		fs.StringVar(&groupBy, "by", "",
			"group the objects: namespace, label:KEY, or a path such as status.phase (default: the total only)")
		fs.BoolVar(&follow, "watch", false, "print new counts whenever they change (at most once per the hub's --count-interval)")
		fs.BoolVar(&follow, "w", false, "shorthand for --watch")
	case "snapshot":
		fs.BoolVar(&showManagedFields, "show-managed-fields", false, "keep metadata.managedFields in -o json and yaml, as kubectl's flag does (a --field naming them keeps them too)")
		fs.BoolVar(&follow, "watch", false, "then watch: print every change after the snapshot, as hubctl watch does")
		fs.BoolVar(&follow, "w", false, "shorthand for --watch")
	case "watch":
		fs.BoolVar(&showManagedFields, "show-managed-fields", false, "keep metadata.managedFields in -o json and yaml, as kubectl's flag does, and in --include-previous's changes (a --field naming them keeps them too)")
		fs.StringVar(&resumeToken, "resume-token", "", "continue right after the event that carried this token")
		fs.BoolVar(&watchOnly, "watch-only", false, "only changes: do not list the current objects first")
		fs.BoolVar(&showPrevious, "include-previous", false,
			"show the state before each MODIFIED: in the table, what changed (~ changed, + added, - removed; resourceVersion aside, and managedFields unless --show-managed-fields); with -o json or yaml, as previousObject")
		fs.BoolVar(&showPrevious, "show-previous", false, "the same as --include-previous")
	}
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageError{err}
	}
	switch output {
	case "", "json", "yaml":
	default:
		return usageError{fmt.Errorf("--output must be json, yaml or empty, not %q", output)}
	}
	if (command == "count" || command == "verify") && len(fields) > 0 {
		return usageError{fmt.Errorf("%s takes no --field", command)}
	}
	if command == "verify" && output != "" {
		return usageError{errors.New("verify takes no --output: it prints one line per comparison")}
	}
	if command == "verify" && interval <= 0 {
		return usageError{fmt.Errorf("--interval must be positive, not %s", interval)}
	}
	switch {
	case allNamespaces && namespace.set:
		return usageError{errors.New("--all-namespaces contradicts --namespace")}
	case allNamespaces:
	case namespace.set:
		sel.Namespace = namespace.value
	default:
		sel.Namespace = c.defaultNamespace(c.stderr)
	}
	p := &printer{stdout: c.stdout, stderr: c.stderr, now: c.now, format: output, showManagedFields: showManagedFields || namesManagedFields(fields)}
	if len(positional) == 1 && strings.Contains(positional[0], ",") {
		// Several resource types, as kubectl takes them: one WatchMany.
		if command != "watch" || group != "" || versionFlag != "" || resourceFlag != "" {
			return usageError{errors.New("several resource types (RESOURCE,RESOURCE) are for watch, without --group, --version and --resource")}
		}
		names := strings.Split(positional[0], ",")
		if slices.Contains(names, "") {
			return usageError{fmt.Errorf("an empty resource type in %q: separate types with single commas, e.g. configmaps,secrets", positional[0])}
		}
		var watches []hubclient.ManyWatch
		for _, name := range names {
			r, err := c.resolve(ctx, []string{name}, "", "", "", sel.Namespace, namespace.set)
			if err != nil {
				return err
			}
			watches = append(watches, hubclient.ManyWatch{Selector: forResource(sel, r)})
			p.withNamespace = p.withNamespace || allNamespaces && r.Namespaced
		}
		if len(fields) > 0 && output == "" {
			fields = append(fields, "metadata.creationTimestamp")
		}
		return c.watchMany(ctx, watches, hubclient.WatchOptions{ResumeToken: resumeToken, SendInitialEvents: !watchOnly && resumeToken == "",
			Fields: fields, IncludePrevious: showPrevious}, p)
	}
	r, err := c.resolve(ctx, positional, group, versionFlag, resourceFlag, sel.Namespace, namespace.set)
	if err != nil {
		return err
	}
	sel = forResource(sel, r)
	p.withNamespace = allNamespaces && r.Namespaced
	switch command {
	case "count":
		return c.count(ctx, sel, groupBy, follow, p)
	case "verify":
		return c.verify(ctx, sel, follow, interval)
	}
	if len(fields) > 0 && output == "" {
		// The table's AGE; it never changes, so it adds no events.
		fields = append(fields, "metadata.creationTimestamp")
	}
	if command == "snapshot" {
		snap, err := c.snapshot(ctx, sel, hubclient.SnapshotOptions{Fields: fields}, follow, p)
		if err != nil || !follow {
			return err
		}
		return c.watch(ctx, sel, hubclient.WatchOptions{ResumeToken: snap.ResumeToken, Fields: fields}, p)
	}
	return c.watch(ctx, sel, hubclient.WatchOptions{ResumeToken: resumeToken, SendInitialEvents: !watchOnly && resumeToken == "",
		Fields: fields, IncludePrevious: showPrevious}, p)
}

// optionalString is a string flag that knows whether it was given.
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string { return o.value }

func (o *optionalString) Set(v string) error {
	o.value, o.set = v, true
	return nil
}

// forResource is sel for the resource type r. A cluster-scoped type has
// no namespace: as kubectl does, one given (or the kubeconfig's) is not
// applied to it.
func forResource(sel hubclient.Selector, r hubclient.Resource) hubclient.Selector {
	sel.Resource = r.GroupVersionResource
	if !r.Namespaced {
		sel.Namespace = ""
	}
	return sel
}

// fieldList is the paths of --fields: comma-separated, or the flag
// repeated. A comma inside brackets (metadata.labels["a,b"]) belongs to
// the name.
type fieldList []string

func (f *fieldList) String() string { return strings.Join(*f, ",") }

func (f *fieldList) Set(value string) error {
	var quote rune // the quote of an open bracketed name
	start := 0
	split := func(end int) error {
		path := strings.TrimSpace(value[start:end])
		if path == "" {
			return errors.New("an empty path: separate paths with single commas, e.g. status.phase,metadata.labels")
		}
		*f = append(*f, path)
		start = end + 1
		return nil
	}
	for i, r := range value {
		switch {
		case quote != 0:
			if r == quote && strings.HasPrefix(value[i+1:], "]") {
				quote = 0
			}
		case (r == '"' || r == '\'') && i > 0 && value[i-1] == '[':
			quote = r
		case r == ',':
			if err := split(i); err != nil {
				return err
			}
		}
	}
	return split(len(value))
}

// namesManagedFields is whether a path of --field is metadata.managedFields
// or within it: asked for by name, they are not left out.
func namesManagedFields(fields []string) bool {
	for _, f := range fields {
		steps, err := projection.ParsePath(f)
		if err == nil && len(steps) >= 2 && steps[0] == "metadata" && steps[1] == "managedFields" {
			return true
		}
	}
	return false
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, as kubectl allows.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (c *cli) watch(ctx context.Context, sel hubclient.Selector, opts hubclient.WatchOptions, out *printer) error {
	w := c.client.Watch(ctx, sel, opts)
	defer w.Close()
	p := eventPrinter{printer: out, namespace: sel.Namespace, batching: opts.SendInitialEvents}
	for {
		e, err := w.Next()
		if err != nil {
			if ctx.Err() != nil && w.ResumeToken() != "" {
				fmt.Fprintf(c.stderr, "\nresume with: --resume-token %s\n", w.ResumeToken())
			}
			return err
		}
		if err := p.print(e, "", e.ResumeToken, e.InitialEventsEnd); err != nil {
			return err
		}
	}
}

// watchMany watches several resource types on one stream (WatchMany),
// each with opts.
func (c *cli) watchMany(ctx context.Context, watches []hubclient.ManyWatch, opts hubclient.WatchOptions, out *printer) error {
	// The namespace of an empty initial list, as kubectl names it: only
	// if every type is listed in it.
	namespace := watches[0].Selector.Namespace
	for i := range watches {
		watches[i].Options = opts
		watches[i].Options.ResumeToken = ""
		if watches[i].Selector.Namespace != namespace {
			namespace = ""
		}
	}
	m := c.client.WatchMany(ctx, watches, opts.ResumeToken)
	defer m.Close()
	p := eventPrinter{printer: out, many: true, namespace: namespace, batching: opts.SendInitialEvents}
	for _, w := range watches {
		p.resources = append(p.resources, w.Selector.Resource.Resource)
	}
	for {
		e, err := m.Next()
		if err != nil {
			if ctx.Err() != nil && m.ResumeToken() != "" {
				fmt.Fprintf(c.stderr, "\nresume with: --resume-token %s\n", m.ResumeToken())
			}
			if i, ok := hubclient.WatchIndex(err); ok && i < len(watches) {
				err = fmt.Errorf("watching %s: %w", watches[i].Selector.Resource.Resource, err)
			}
			return err
		}
		if err := p.print(e.Event, watches[e.Index].Selector.Resource.Resource, e.ManyResumeToken, e.AllInitialEventsEnd); err != nil {
			return err
		}
	}
}

// snapshot prints the objects sel selects at one point in time, and returns
// the snapshot, whose ResumeToken a watch continues from (as the caller
// will, when follow).
func (c *cli) snapshot(ctx context.Context, sel hubclient.Selector, opts hubclient.SnapshotOptions, follow bool, out *printer) (*hubclient.Snapshot, error) {
	snap, err := c.client.SnapshotWithOptions(ctx, sel, opts)
	if err != nil {
		return nil, err
	}
	if out.format != "" {
		items := make([]json.RawMessage, len(snap.Objects))
		for i, o := range snap.Objects {
			if items[i], err = out.object(o); err != nil {
				return nil, err
			}
		}
		return snap, out.document(listJSON{APIVersion: "v1", Kind: "List", Metadata: listMeta{ResourceVersion: snap.ResourceVersion},
			Items: items, ResumeToken: snap.ResumeToken, FilterErrors: snap.FilterErrors})
	}
	table := newTable(c.stdout, out.objectHeader()...)
	for i, o := range snap.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o); err != nil {
			return nil, err
		}
		if len(snap.FilterErrors) > 0 && snap.FilterErrors[i] != "" {
			fmt.Fprintf(c.stderr, "(the filter could not decide on %s, listed as if it matched: %s)\n", objectName(u), escapeCell(snap.FilterErrors[i]))
		}
		table.row(out.objectRow(u)...)
	}
	if err := table.flush(); err != nil {
		return nil, err
	}
	if len(snap.Objects) == 0 {
		out.noResources(sel.Namespace)
	}
	if follow {
		fmt.Fprintf(c.stderr, "%d objects at resourceVersion %s; the changes after them follow\n", len(snap.Objects), snap.ResourceVersion)
	} else {
		fmt.Fprintf(c.stderr, "%d objects at resourceVersion %s; watch the changes after them with: --resume-token %s\n",
			len(snap.Objects), snap.ResourceVersion, snap.ResumeToken)
	}
	return snap, nil
}

// count prints how many objects sel selects, per group: the current
// counts, then, following, new counts as they change.
func (c *cli) count(ctx context.Context, sel hubclient.Selector, groupBy string, follow bool, out *printer) error {
	counter := c.client.Count(ctx, sel, groupBy)
	defer counter.Close()
	for first := true; ; first = false {
		counts, err := counter.Next()
		if err != nil {
			return err
		}
		if err := out.counts(counts, groupBy, first); err != nil {
			return err
		}
		if !follow {
			return nil
		}
	}
}

func (c *cli) resources(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resources", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var output, namespace string
	fs.StringVar(&output, "output", "", "output format: empty for a table, wide for a table with the fields each type can be selected by (--field-selector), json or yaml")
	fs.StringVar(&output, "o", "", "shorthand for --output")
	fs.StringVar(&namespace, "namespace", "", "what you may list and watch in this namespace (default: cluster-wide)")
	fs.StringVar(&namespace, "n", "", "shorthand for --namespace")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	switch output {
	case "", "wide", "json", "yaml":
	default:
		return usageError{fmt.Errorf("--output must be wide, json, yaml or empty, not %q", output)}
	}
	resources, err := c.client.ListResources(ctx, namespace)
	if err != nil {
		return err
	}
	if output == "json" || output == "yaml" {
		return (&printer{stdout: c.stdout, format: output}).document(resources)
	}
	// The hub shows its activity, which spans all namespaces, only to
	// callers asking cluster-wide.
	header := []string{"GROUP", "VERSION", "RESOURCE", "KIND"}
	if namespace == "" {
		header = append(header, "NAMESPACED", "INFORMER", "SUBSCRIBERS", "OBJECTS")
	}
	if output == "wide" {
		header = append(header, "SELECTABLE-FIELDS")
	}
	table := newTable(c.stdout, header...)
	for _, r := range resources {
		row := []string{r.Group, r.Version, r.Resource, r.Kind}
		if namespace == "" {
			informer := "-"
			if r.InformerActive {
				informer = "running"
			}
			row = append(row, fmt.Sprint(r.Namespaced), informer, fmt.Sprint(r.Subscribers), fmt.Sprint(r.CachedObjects))
		}
		if output == "wide" {
			row = append(row, strings.Join(r.SelectableFields, ","))
		}
		table.row(row...)
	}
	return table.flush()
}
