// Command hubctl reads Kubernetes objects through an informerhub: `kubectl get
// -w` for the hub.
//
//	hubctl [--hub ADDR[,ADDR...]] [--insecure | --ca-file F] [--token-file F | --cert-file F --key-file F] COMMAND [flags] [RESOURCE]
//
//	hubctl watch configmaps -n demo            initial objects, then every change
//	hubctl watch configmaps,secrets -n demo    several types on one stream (WatchMany)
//	hubctl watch deployments.apps -l app=web   a resource.group shorthand
//	hubctl watch pods --field-selector spec.nodeName=node-1 --fields status.phase --show-previous
//	hubctl watch configmaps --filter 'has(object.data.mode) && object.data.mode == "debug"'
//	hubctl snapshot configmaps -n demo -o json
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
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/version"

	hubclient "github.com/informerhub/informerhub/clients/go"
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
  hubctl [global flags] resources [flags]          the resource types you may watch

RESOURCE is a plural resource name with an optional version and group:
configmaps, deployments.apps, deployments.v1.apps. Without a version, the
newest one the cluster serves is used. watch takes several, comma-separated
(configmaps,secrets): one stream of them all, with the same flags for each.

Examples:
  hubctl watch configmaps -n demo -l app=web
  hubctl watch configmaps,secrets -n demo
  hubctl watch pods --field-selector spec.nodeName=node-1 --fields status.phase --show-previous
  hubctl watch configmaps --filter 'has(object.data.mode) && object.data.mode == "debug"'
  hubctl snapshot pods --fields metadata.labels,status.phase -o json
  hubctl count pods --by status.phase -w
  hubctl resources -o wide     the fields each type can be selected by

"hubctl COMMAND -h" describes a command's flags.

Global flags:
`

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
	opts := []hubclient.Option{hubclient.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	tlsOpt, err := transport(*insecure, *caFile, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "hubctl:", err)
		return 2
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	if *tokenFile != "" {
		path := *tokenFile
		opts = append(opts, hubclient.WithTokenSource(func(context.Context) (string, error) {
			b, err := os.ReadFile(path)
			return strings.TrimSpace(string(b)), err
		}))
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
	c := &cli{stdout: stdout, stderr: stderr, now: now, client: client}

	command, rest := global.Arg(0), global.Args()[1:]
	switch command {
	case "watch", "snapshot", "count":
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
	if st, ok := status.FromError(err); ok && st.Err().Error() == err.Error() {
		fmt.Fprintf(stderr, "hubctl: %s: %s\n", st.Code(), st.Message())
	} else {
		fmt.Fprintln(stderr, "hubctl:", err) // a status wrapped with context
	}
	return 1
}

type usageError struct{ error }

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// objects runs watch and snapshot.
func (c *cli) objects(ctx context.Context, command string, args []string) error {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var sel hubclient.Selector
	var output, resumeToken, group, versionFlag, resourceFlag string
	var fields fieldList
	var watchOnly, showPrevious bool
	fs.StringVar(&sel.Namespace, "namespace", "", "the namespace (default: all)")
	fs.StringVar(&sel.Namespace, "n", "", "shorthand for --namespace")
	fs.StringVar(&sel.LabelSelector, "selector", "", "a label selector, e.g. app=web")
	fs.StringVar(&sel.LabelSelector, "l", "", "shorthand for --selector")
	fs.StringVar(&sel.FieldSelector, "field-selector", "",
		"a field selector, e.g. spec.nodeName=node-1,status.phase!=Succeeded for pods: any field the resource type supports, with =, == and != (hubctl resources -o wide lists them)")
	fs.StringVar(&sel.Filter, "filter", "",
		"a CEL `expression` over object, Kubernetes' dialect: only the objects it is true for, e.g. 'object.status.phase == \"Running\"'")
	fs.StringVar(&sel.ShardSelector, "shard", "",
		"a Kubernetes shard `selector`, as sharded controllers use: only the objects whose uid's (or namespace's) hash is in its ranges, e.g. \"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')\"")
	fs.Var(&fields, "fields",
		"only these `paths` of each object, comma-separated or repeated, e.g. status.phase,metadata.labels (with apiVersion, kind and metadata name, namespace, uid and resourceVersion); a watch then shows only the changes of these")
	fs.StringVar(&output, "output", "", "output format: empty for a table, json for one JSON document per line")
	fs.StringVar(&output, "o", "", "shorthand for --output")
	fs.StringVar(&group, "group", "", "the API group (instead of RESOURCE)")
	fs.StringVar(&versionFlag, "version", "", "the API version")
	fs.StringVar(&resourceFlag, "resource", "", "the plural resource name (instead of RESOURCE)")
	var groupBy string
	var follow bool
	if command == "count" {
		fs.StringVar(&groupBy, "by", "",
			"group the objects: namespace, label:KEY, or a path such as status.phase (default: the total only)")
		fs.BoolVar(&follow, "watch", false, "print new counts whenever they change (at most once per the hub's --count-interval)")
		fs.BoolVar(&follow, "w", false, "shorthand for --watch")
	}
	if command == "watch" {
		fs.StringVar(&resumeToken, "resume-token", "", "continue right after the event that carried this token")
		fs.BoolVar(&watchOnly, "watch-only", false, "only changes: do not list the current objects first")
		fs.BoolVar(&showPrevious, "show-previous", false,
			"show the state before each MODIFIED: in the table, what changed (~ changed, + added, - removed; resourceVersion and managedFields aside); with -o json, as previousObject")
	}
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageError{err}
	}
	if output != "" && output != "json" {
		return usageError{fmt.Errorf("--output must be json or empty, not %q", output)}
	}
	if len(positional) == 1 && strings.Contains(positional[0], ",") {
		// Several resource types, as kubectl takes them: one WatchMany.
		if command != "watch" || group != "" || versionFlag != "" || resourceFlag != "" {
			return usageError{errors.New("several resource types (RESOURCE,RESOURCE) are for watch, without --group, --version and --resource")}
		}
		var resources []schema.GroupVersionResource
		for _, name := range strings.Split(positional[0], ",") {
			r, err := c.resolve(ctx, sel.Namespace, []string{name}, "", "", "")
			if err != nil {
				return err
			}
			resources = append(resources, r)
		}
		if len(fields) > 0 && output != "json" {
			fields = append(fields, "metadata.creationTimestamp")
		}
		return c.watchMany(ctx, sel, resources, hubclient.WatchOptions{ResumeToken: resumeToken, SendInitialEvents: !watchOnly && resumeToken == "",
			Fields: fields, IncludePrevious: showPrevious}, output == "json")
	}
	if sel.Resource, err = c.resolve(ctx, sel.Namespace, positional, group, versionFlag, resourceFlag); err != nil {
		return err
	}
	asJSON := output == "json"
	if command == "count" {
		if len(fields) > 0 {
			return usageError{errors.New("count takes no --fields")}
		}
		return c.count(ctx, sel, groupBy, follow, asJSON)
	}
	if len(fields) > 0 && !asJSON {
		// The table's AGE; it never changes, so it adds no events.
		fields = append(fields, "metadata.creationTimestamp")
	}
	if command == "snapshot" {
		return c.snapshot(ctx, sel, hubclient.SnapshotOptions{Fields: fields}, asJSON)
	}
	return c.watch(ctx, sel, hubclient.WatchOptions{ResumeToken: resumeToken, SendInitialEvents: !watchOnly && resumeToken == "",
		Fields: fields, IncludePrevious: showPrevious}, asJSON)
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

// resolve finds the resource a command names, asking the hub which
// versions the cluster serves, and the caller may watch in namespace, when
// it must.
func (c *cli) resolve(ctx context.Context, namespace string, positional []string, group, ver, resource string) (schema.GroupVersionResource, error) {
	switch {
	case len(positional) > 1:
		return schema.GroupVersionResource{}, usageError{fmt.Errorf("one RESOURCE at most, got %q", positional)}
	case len(positional) == 1 && resource != "":
		return schema.GroupVersionResource{}, usageError{errors.New("give RESOURCE or --resource, not both")}
	case len(positional) == 0 && resource == "":
		return schema.GroupVersionResource{}, usageError{errors.New("which resource? e.g. hubctl watch configmaps")}
	}
	if resource != "" && ver != "" {
		return schema.GroupVersionResource{Group: group, Version: ver, Resource: resource}, nil
	}
	served, err := c.client.ListResources(ctx, namespace)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("finding the resource's version (give --group, --version and --resource to skip this): %w", err)
	}
	var gvrs []schema.GroupVersionResource
	for _, r := range served {
		gvrs = append(gvrs, r.GroupVersionResource)
	}
	name := resource
	if name == "" {
		name = positional[0]
	}
	gvr, ok := pickResource(gvrs, name, resource != "", group, ver)
	if !ok {
		where, hint := "cluster-wide", ""
		if namespace != "" {
			where, hint = "in namespace "+namespace, " -n "+namespace
		}
		return schema.GroupVersionResource{}, fmt.Errorf("no resource %q that you may list and watch %s (see hubctl resources%s)", name, where, hint)
	}
	return gvr, nil
}

// pickResource finds what name means among the served resources: a plural
// resource name with an optional version and group (configmaps,
// deployments.apps, deployments.v1.apps), or, when exact, the --resource
// flag with --group. Of several versions it picks ver, else the newest: GA
// before beta before alpha.
func pickResource(served []schema.GroupVersionResource, name string, exact bool, group, ver string) (schema.GroupVersionResource, bool) {
	var candidates []schema.GroupVersionResource
	for _, gvr := range served {
		var match bool
		switch {
		case exact || group != "":
			// --resource, or a plain RESOURCE, with --group.
			match = gvr.Resource == name && gvr.Group == group
		default:
			match = name == gvr.Resource && gvr.Group == "" ||
				name == gvr.Resource+"."+gvr.Group ||
				name == gvr.Resource+"."+gvr.Version && gvr.Group == "" ||
				name == gvr.Resource+"."+gvr.Version+"."+gvr.Group
		}
		if match && (ver == "" || gvr.Version == ver) {
			candidates = append(candidates, gvr)
		}
	}
	if len(candidates) == 0 {
		return schema.GroupVersionResource{}, false
	}
	return slices.MaxFunc(candidates, func(a, b schema.GroupVersionResource) int {
		return version.CompareKubeAwareVersionStrings(a.Version, b.Version) // > 0: a is newer
	}), true
}

func (c *cli) watch(ctx context.Context, sel hubclient.Selector, opts hubclient.WatchOptions, asJSON bool) error {
	w := c.client.Watch(ctx, sel, opts)
	defer w.Close()
	p := eventPrinter{cli: c, asJSON: asJSON}
	for {
		e, err := w.Next()
		if err != nil {
			if ctx.Err() != nil && w.ResumeToken() != "" {
				fmt.Fprintf(c.stderr, "\nresume with: --resume-token %s\n", w.ResumeToken())
			}
			return err
		}
		if err := p.print(e, "", e.ResumeToken); err != nil {
			return err
		}
	}
}

// watchMany watches several resource types on one stream (WatchMany): the
// same selector and options for each.
func (c *cli) watchMany(ctx context.Context, sel hubclient.Selector, resources []schema.GroupVersionResource, opts hubclient.WatchOptions, asJSON bool) error {
	watches := make([]hubclient.ManyWatch, len(resources))
	for i, r := range resources {
		watches[i] = hubclient.ManyWatch{Selector: sel, Options: opts}
		watches[i].Selector.Resource = r
		watches[i].Options.ResumeToken = ""
	}
	m := c.client.WatchMany(ctx, watches, opts.ResumeToken)
	defer m.Close()
	p := eventPrinter{cli: c, asJSON: asJSON, many: true}
	for {
		e, err := m.Next()
		if err != nil {
			if ctx.Err() != nil && m.ResumeToken() != "" {
				fmt.Fprintf(c.stderr, "\nresume with: --resume-token %s\n", m.ResumeToken())
			}
			if i, ok := hubclient.WatchIndex(err); ok && i < len(resources) {
				err = fmt.Errorf("watching %s: %w", resources[i].Resource, err)
			}
			return err
		}
		if err := p.print(e.Event, resources[e.Index].Resource, e.ManyResumeToken); err != nil {
			return err
		}
	}
}

// eventPrinter prints the events of a watch, or of a WatchMany (many: with
// each event's resource type).
type eventPrinter struct {
	*cli
	asJSON, many bool
	table        *table // made at the first object, so that errors come before a header
	relistNoted  bool   // the ~ of relisted events has been explained
}

// print prints e, of resource, whose stream resumes after it from token.
func (p *eventPrinter) print(e hubclient.Event, resource, token string) error {
	c := p.cli
	if p.asJSON {
		return c.printJSON(eventJSON{Type: e.Type, Resource: resource, Object: json.RawMessage(e.Object), PreviousObject: json.RawMessage(e.Previous),
			ResourceVersion: e.ResourceVersion, ResumeToken: token, InitialEventsEnd: e.InitialEventsEnd, FromRelist: e.FromRelist, FilterError: e.FilterError, Resync: e.Resync})
	}
	if e.Type == hubclient.Bookmark {
		switch {
		case e.ResyncReplaces:
			fmt.Fprintln(c.stderr, "(the hub could not resume this watch; it listed again: the objects marked * are all that exist now)")
		case e.Resync:
			fmt.Fprintln(c.stderr, "(the hub could not resume this watch; it re-synced: the changes marked * are the differences)")
		}
		return nil
	}
	u, err := e.Unstructured()
	if err != nil {
		return err
	}
	eventType := string(e.Type)
	if e.Resync {
		eventType += "*"
	}
	if e.FromRelist {
		if !p.relistNoted {
			fmt.Fprintln(c.stderr, "(the events marked ~ were found by a relist of the hub: what happened in between is unknown)")
			p.relistNoted = true
		}
		eventType += "~"
	}
	if e.FilterError != "" {
		// Rare, and each may say something else: on its line.
		fmt.Fprintf(c.stderr, "(the filter could not decide on %s/%s, sent as if it matched: %s)\n", u.GetNamespace(), u.GetName(), e.FilterError)
		eventType += "?"
	}
	switch {
	case p.table == nil && p.many:
		p.table = c.table(true, "EVENT", "RESOURCE", "NAMESPACE", "NAME", "RESOURCEVERSION", "AGE")
	case p.table == nil:
		p.table = c.table(true, "EVENT", "NAMESPACE", "NAME", "RESOURCEVERSION", "AGE")
	}
	if p.many {
		p.table.row(eventType, resource, u.GetNamespace(), u.GetName(), u.GetResourceVersion(), c.age(u))
	} else {
		p.table.row(eventType, u.GetNamespace(), u.GetName(), u.GetResourceVersion(), c.age(u))
	}
	if e.Type == hubclient.Modified && e.Previous != nil {
		changes, err := diffObjects(e.Previous, e.Object)
		if err != nil {
			return err
		}
		for _, change := range changes {
			p.table.detail(change)
		}
	}
	return nil
}

// eventJSON is a watch event as `hubctl watch -o json` prints it.
type eventJSON struct {
	Type hubclient.EventType `json:"type"`
	// Resource is the event's resource type, when several are watched.
	Resource         string          `json:"resource,omitempty"`
	Object           json.RawMessage `json:"object,omitempty"`
	PreviousObject   json.RawMessage `json:"previousObject,omitempty"`
	ResourceVersion  string          `json:"resourceVersion"`
	ResumeToken      string          `json:"resumeToken"`
	InitialEventsEnd bool            `json:"initialEventsEnd,omitempty"`
	FromRelist       bool            `json:"fromRelist,omitempty"`
	FilterError      string          `json:"filterError,omitempty"`
	Resync           bool            `json:"resync,omitempty"`
}

func (c *cli) snapshot(ctx context.Context, sel hubclient.Selector, opts hubclient.SnapshotOptions, asJSON bool) error {
	snap, err := c.client.SnapshotWithOptions(ctx, sel, opts)
	if err != nil {
		return err
	}
	if asJSON {
		objects := make([]json.RawMessage, len(snap.Objects))
		for i, o := range snap.Objects {
			objects[i] = o
		}
		return c.printJSON(struct {
			ResourceVersion string            `json:"resourceVersion"`
			ResumeToken     string            `json:"resumeToken"`
			Objects         []json.RawMessage `json:"objects"`
			FilterErrors    []string          `json:"filterErrors,omitempty"`
		}{snap.ResourceVersion, snap.ResumeToken, objects, snap.FilterErrors})
	}
	table := c.table(false, "NAMESPACE", "NAME", "RESOURCEVERSION", "AGE")
	for i, o := range snap.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o); err != nil {
			return err
		}
		if len(snap.FilterErrors) > 0 && snap.FilterErrors[i] != "" {
			fmt.Fprintf(c.stderr, "(the filter could not decide on %s/%s, listed as if it matched: %s)\n", u.GetNamespace(), u.GetName(), snap.FilterErrors[i])
		}
		table.row(u.GetNamespace(), u.GetName(), u.GetResourceVersion(), c.age(u))
	}
	table.flush()
	fmt.Fprintf(c.stderr, "%d objects at resourceVersion %s; watch the changes after them with: --resume-token %s\n",
		len(snap.Objects), snap.ResourceVersion, snap.ResumeToken)
	return nil
}

// count prints how many objects sel selects, per group: the current
// counts, then, following, new counts as they change.
func (c *cli) count(ctx context.Context, sel hubclient.Selector, groupBy string, follow, asJSON bool) error {
	counter := c.client.Count(ctx, sel, groupBy)
	defer counter.Close()
	for first := true; ; first = false {
		counts, err := counter.Next()
		if err != nil {
			return err
		}
		if asJSON {
			err = c.printJSON(struct {
				Groups          map[string]uint64 `json:"groups,omitempty"`
				Total           uint64            `json:"total"`
				ResourceVersion string            `json:"resourceVersion"`
			}{counts.Groups, counts.Total, counts.ResourceVersion})
			if err != nil {
				return err
			}
		} else {
			if !first {
				fmt.Fprintln(c.stdout)
			}
			if groupBy == "" {
				table := c.table(false, "COUNT")
				table.row(strconv.FormatUint(counts.Total, 10))
				table.flush()
			} else {
				table := c.table(false, strings.ToUpper(groupBy), "COUNT")
				for _, group := range slices.Sorted(maps.Keys(counts.Groups)) {
					shown := group
					if shown == "" {
						shown = "<none>"
					}
					table.row(shown, strconv.FormatUint(counts.Groups[group], 10))
				}
				table.row("TOTAL", strconv.FormatUint(counts.Total, 10))
				table.flush()
			}
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
	fs.StringVar(&output, "output", "", "output format: empty for a table, wide for a table with the fields each type can be selected by (--field-selector), json")
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
	case "", "wide", "json":
	default:
		return usageError{fmt.Errorf("--output must be wide, json or empty, not %q", output)}
	}
	resources, err := c.client.ListResources(ctx, namespace)
	if err != nil {
		return err
	}
	if output == "json" {
		return c.printJSON(resources)
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
	table := c.table(false, header...)
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
	table.flush()
	return nil
}

func (c *cli) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func (c *cli) age(u *unstructured.Unstructured) string {
	created := u.GetCreationTimestamp()
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(c.now().Sub(created.Time))
}

// table prints rows in aligned columns. A streaming table (a watch) writes
// each row at once, so events show as they happen: its columns start at the
// widths below and grow when a value is wider, as with kubectl get -w.
// Otherwise rows are aligned all together when the table is flushed.
type table struct {
	out    io.Writer
	header []string
	stream bool
	widths []int
	rows   [][]string
}

// streamWidths are the first column widths of a streaming table, enough for
// most values so that rows line up from the start.
var streamWidths = map[string]int{"EVENT": 9, "NAMESPACE": 16, "NAME": 32, "RESOURCEVERSION": 15, "AGE": 5}

func (c *cli) table(stream bool, header ...string) *table {
	t := &table{out: c.stdout, header: header, stream: stream, widths: make([]int, len(header))}
	for i, h := range header {
		t.widths[i] = len(h)
		if stream {
			t.widths[i] = max(len(h), streamWidths[h])
		}
	}
	if stream {
		t.write(header)
	}
	return t
}

func (t *table) row(cells ...string) {
	if t.stream {
		t.write(cells)
		return
	}
	t.rows = append(t.rows, cells)
}

// detail writes a line under the last row of a streaming table, aligned
// with its second column.
func (t *table) detail(line string) {
	fmt.Fprintf(t.out, "%s%s\n", strings.Repeat(" ", t.widths[0]+3), line)
}

func (t *table) flush() {
	if t.stream {
		return
	}
	for _, row := range t.rows {
		for i, cell := range row {
			t.widths[i] = max(t.widths[i], len(cell))
		}
	}
	t.write(t.header)
	for _, row := range t.rows {
		t.write(row)
	}
}

func (t *table) write(cells []string) {
	var b strings.Builder
	for i, cell := range cells {
		t.widths[i] = max(t.widths[i], len(cell))
		if i == len(cells)-1 {
			b.WriteString(cell)
			break
		}
		fmt.Fprintf(&b, "%-*s   ", t.widths[i], cell)
	}
	fmt.Fprintln(t.out, b.String())
}
