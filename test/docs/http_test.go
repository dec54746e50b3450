package docs

import (
	"path/filepath"
	"strings"
	"testing"
)

// httpRecipesHubFlags are the flags the hub of docs/http.md runs with, as
// the document says: snapshot pages small enough that three objects take
// two.
var httpRecipesHubFlags = []string{"--auth", "kubernetes", "--snapshot-page-size", "2"}

// TestHTTPRecipes runs every command of docs/http.md (curl speaking the
// Connect protocol, buf curl speaking Connect and gRPC-Web) against a hub
// that authenticates its callers with the API server, and checks each
// one's exit status and output, as TestGRPCurlCookbook does for
// docs/grpcurl.md, with the same variables (HUB, TOKEN, NS, KUBECONFIG; buf
// and kubectl from .cache/tools/bin first on the PATH, curl the system's).
//
// One difference in matching: a space after a comma is ignored, in the
// output and in the expected output alike. The hub's Connect side writes
// compact JSON with Go's protojson, which adds such a space at random (per
// binary) so that no one relies on its exact bytes; the multi-line JSON of
// buf curl only varies in runs of spaces, which Match ignores already.
func TestHTTPRecipes(t *testing.T) {
	runDocument(t, document{
		path:            filepath.Join("docs", "http.md"),
		namespacePrefix: "recipes-",
		hubFlags:        httpRecipesHubFlags,
		tools: []tool{
			{"buf", "make tools"},
			{"kubectl", "make .cache/tools/bin/kubectl (make run builds it too)"},
		},
		commands:  []string{"curl"},
		normalize: withoutSpaceAfterCommas,
	})
}

// withoutSpaceAfterCommas drops the spaces that follow commas.
func withoutSpaceAfterCommas(s string) string {
	for strings.Contains(s, ", ") {
		s = strings.ReplaceAll(s, ", ", ",")
	}
	return s
}
