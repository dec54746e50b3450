package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTheProtoDefinesEveryReason checks that the reasons the server sends
// (the Reason constants) are those the proto's service comment defines, as
// "CODE · REASON": the proto is the one place a client reads what each
// means, and neither may drift from the other.
func TestTheProtoDefinesEveryReason(t *testing.T) {
	proto, err := os.ReadFile("../proto/informerhub/v1/informerhub.proto")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`[A-Z_]+ · ([A-Z_]+)`).FindAllStringSubmatch(string(proto), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)
	documented = slices.Compact(documented)

	file, err := parser.ParseFile(token.NewFileSet(), "status.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") {
					continue
				}
				reason, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				sent = append(sent, reason)
			}
		}
	}
	slices.Sort(sent)
	if len(sent) == 0 || !slices.Equal(sent, documented) {
		t.Errorf("the server sends the reasons %q, the proto defines %q", sent, documented)
	}
}
