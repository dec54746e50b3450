package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// python is Debian's interpreter: python3-grpcio, python3-protobuf and
// python3-grpc-tools install there, not into other Pythons on PATH.
const python = "/usr/bin/python3"

// TestPythonClient runs the Python client's suite (clients/python,
// test_client.py) against a real API server and hub, with stubs generated
// afresh from proto/ so that it never runs on stale ones.
func TestPythonClient(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf, grpc_tools.protoc").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks the Debian packages python3-grpcio, python3-protobuf or python3-grpc-tools: run `make python-deps` (%v)\n%s", python, err, out)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	generate := exec.Command(filepath.Join(dir, "generate.sh"), stubs)
	generate.Env = append(os.Environ(), "PYTHON="+python)
	if out, err := generate.CombinedOutput(); err != nil {
		t.Fatalf("generating the Python stubs: %v\n%s", err, out)
	}

	env := clientEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	suite := exec.CommandContext(ctx, python, "-m", "unittest", "-v")
	suite.Dir = dir
	suite.Env = append(env, "PYTHONPATH="+stubs, "PYTHONDONTWRITEBYTECODE=1")
	suite.WaitDelay = 10 * time.Second
	out, err := suite.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python client's tests failed (%v):\n%s", err, out)
	}
	t.Logf("the Python client's tests:\n%s", out)
}
