package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/clientcmd"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// resolve finds the resource type a command names, asking the hub which
// types and versions the cluster serves, when it must. It asks for every
// type, those the caller may not read too (marked Forbidden), so that a
// name the caller may not read is resolved all the same, and the hub's
// PERMISSION_DENIED, which says why, reaches the user. namespace is where
// the command looks (for a hub too old to list what the caller may not
// read), namespaceGiven whether -n said so.
func (c *cli) resolve(ctx context.Context, positional []string, group, ver, resource, namespace string, namespaceGiven bool) (hubclient.Resource, error) {
	switch {
	case len(positional) > 1:
		return hubclient.Resource{}, usageError{fmt.Errorf("one RESOURCE at most, got %q", positional)}
	case len(positional) == 1 && resource != "":
		return hubclient.Resource{}, usageError{fmt.Errorf("give RESOURCE or --resource, not both")}
	case len(positional) == 0 && resource == "":
		return hubclient.Resource{}, usageError{fmt.Errorf("which resource? e.g. hubctl watch configmaps")}
	case len(positional) == 1 && positional[0] == "":
		return hubclient.Resource{}, usageError{fmt.Errorf("an empty RESOURCE")}
	}
	if resource != "" && ver != "" {
		// Named in full: the hub needs no asking, but for the type's scope.
		gvr := schema.GroupVersionResource{Group: group, Version: ver, Resource: resource}
		if served, err := c.servedTypes(ctx, namespace); err == nil {
			if i := slices.IndexFunc(served, func(r hubclient.Resource) bool { return r.GroupVersionResource == gvr }); i >= 0 {
				return served[i], nil
			}
		}
		// Unknown: a namespace applies only if -n gave it.
		return hubclient.Resource{GroupVersionResource: gvr, Namespaced: namespaceGiven}, nil
	}
	served, err := c.servedTypes(ctx, namespace)
	if err != nil {
		return hubclient.Resource{}, err
	}
	name := resource
	if name == "" {
		name = positional[0]
	}
	return pickResource(served, name, resource != "", group, ver)
}

// servedTypes is what the hub serves: every type, with IncludeForbidden; a
// hub older than that field lists only what the caller may read in
// namespace (and names types by their plural only).
func (c *cli) servedTypes(ctx context.Context, namespace string) ([]hubclient.Resource, error) {
	if c.served != nil {
		return c.served, nil
	}
	served, err := c.client.ListResourcesWithOptions(ctx, hubclient.ListResourcesOptions{IncludeForbidden: true})
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(served, func(r hubclient.Resource) bool { return r.SingularName != "" }) {
		// Every hub that knows IncludeForbidden sends singular names.
		if served, err = c.client.ListResources(ctx, namespace); err != nil {
			return nil, err
		}
	}
	c.served = served
	return served, nil
}

// pickResource finds what name means among the served resource types, as
// kubectl reads a resource argument: a plural, singular or short name, or a
// kind in any case (configmaps, configmap, cm, ConfigMap), with an optional
// version and group (deployments.apps, deploy.v1.apps, configmaps.v1); or,
// when exact, the --resource flag with --group. A name without a group is
// the core group's, else the one group that serves it. Of several versions
// it picks ver, else the newest: GA before beta before alpha.
func pickResource(served []hubclient.Resource, name string, exact bool, group, ver string) (hubclient.Resource, error) {
	base, qualifier, qualified := strings.Cut(name, ".")
	if exact {
		base, qualified = name, false
	}
	var candidates []hubclient.Resource
	for _, r := range served {
		if !namedBy(r, base, exact) || ver != "" && r.Version != ver {
			continue
		}
		var match bool
		switch {
		case exact || group != "":
			match = !qualified && r.Group == group
		case !qualified:
			match = true // any group: see below
		default:
			match = qualifier == r.Group ||
				qualifier == r.Version && r.Group == "" ||
				qualifier == r.Version+"."+r.Group
		}
		if match {
			candidates = append(candidates, r)
		}
	}
	if !exact && group == "" && !qualified {
		// A bare name: the core group's, else the one group's.
		groups := map[string]bool{}
		for _, r := range candidates {
			groups[r.Group] = true
		}
		switch {
		case groups[""]:
			candidates = slices.DeleteFunc(candidates, func(r hubclient.Resource) bool { return r.Group != "" })
		case len(groups) > 1:
			var names []string
			for _, r := range candidates {
				if n := r.Resource + "." + r.Group; !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			return hubclient.Resource{}, usageError{fmt.Errorf("%q is served by %d API groups: name one, e.g. %s", name, len(groups), strings.Join(names, " or "))}
		}
	}
	if len(candidates) == 0 {
		msg := fmt.Sprintf("the cluster serves no resource type %q that can be watched", name)
		if ver != "" {
			msg = fmt.Sprintf("the cluster serves no resource type %q in version %s that can be watched", name, ver)
		}
		if guess := closest(served, base); guess != "" {
			msg += "; did you mean " + guess + "?"
		}
		return hubclient.Resource{}, fmt.Errorf("%s (hubctl resources lists them)", msg)
	}
	return slices.MaxFunc(candidates, func(a, b hubclient.Resource) int {
		return version.CompareKubeAwareVersionStrings(a.Version, b.Version) // > 0: a is newer
	}), nil
}

// namedBy tells whether name is one of r's names: its plural, or, unless
// exact (the --resource flag, a plural), its singular, a short name or its
// kind in any case.
func namedBy(r hubclient.Resource, name string, exact bool) bool {
	if name == r.Resource {
		return true
	}
	if exact {
		return false
	}
	lower := strings.ToLower(name)
	return lower == r.Resource || lower == r.SingularName || lower == strings.ToLower(r.Kind) || slices.Contains(r.ShortNames, lower)
}

// closest is the served type whose name is nearest to name, within two
// edits, as resource.group ("configmaps", "deployments.apps"); "" if none
// is.
func closest(served []hubclient.Resource, name string) string {
	name = strings.ToLower(name)
	best, bestDistance := "", 3
	for _, r := range served {
		for _, n := range append([]string{r.Resource, r.SingularName, strings.ToLower(r.Kind)}, r.ShortNames...) {
			if d := editDistance(name, n); n != "" && d < bestDistance {
				best, bestDistance = r.Resource, d
				if r.Group != "" {
					best += "." + r.Group
				}
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kubeconfigNamespace is the namespace kubectl would use: the current
// context's in the kubeconfig ($KUBECONFIG, else ~/.kube/config), or the
// pod's in a cluster; "default" without either. A kubeconfig that cannot
// be read is said on warn, where kubectl would fail: hubctl needs only its
// namespace.
func kubeconfigNamespace(warn io.Writer) string {
	config := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	ns, _, err := config.Namespace()
	switch {
	case err != nil && !clientcmd.IsEmptyConfig(err):
		fmt.Fprintf(warn, "hubctl: the kubeconfig cannot be read (%v): using the namespace \"default\"; give -n or -A\n", err)
	case err == nil && ns != "":
		return ns
	}
	return "default"
}
