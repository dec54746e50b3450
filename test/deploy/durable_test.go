package deploy

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/informerhub/informerhub/internal/testhub"
)

// deploy/durable is the base with its history on disk: the base's pod,
// as a StatefulSet whose volume per replica holds --history-dir, within
// the volume's size; the hub accepts its arguments; and the API server
// accepts every object, with no warning (Pod Security restricted, too).
func TestDurableVariant(t *testing.T) {
	k := newKubectl(t)
	dir := filepath.Join(repoRoot(t), "deploy", "durable")
	objs := k.render(t, dir)
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" {
			t.Errorf("deploy/durable has the Deployment %s besides its StatefulSet", obj.GetName())
		}
	}
	var sts appsv1.StatefulSet
	var base appsv1.Deployment
	fromUnstructured(t, only(t, objs, "StatefulSet")[0], &sts)
	fromUnstructured(t, only(t, k.render(t, filepath.Join(repoRoot(t), "deploy")), "Deployment")[0], &base)

	c, baseC := sts.Spec.Template.Spec.Containers[0], base.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args[:len(baseC.Args)], baseC.Args) {
		t.Errorf("the StatefulSet's arguments do not begin with the base Deployment's:\n%q\n%q", c.Args, baseC.Args)
	}
	flags := map[string]string{}
	for _, arg := range c.Args {
		name, value, _ := strings.Cut(arg, "=")
		flags[name] = value
	}
	historyDir := flags["--history-dir"]
	var claim *corev1.PersistentVolumeClaim
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(historyDir+"/", m.MountPath+"/") {
			for i, tpl := range sts.Spec.VolumeClaimTemplates {
				if tpl.Name == m.Name {
					claim = &sts.Spec.VolumeClaimTemplates[i]
				}
			}
		}
	}
	if claim == nil {
		t.Fatalf("--history-dir=%s is on no volume of the StatefulSet's claim templates", historyDir)
	}
	diskBytes, err := strconv.ParseInt(flags["--history-disk-bytes"], 10, 64)
	if err != nil {
		t.Fatalf("--history-disk-bytes: %v", err)
	}
	if size := claim.Spec.Resources.Requests.Storage().Value(); diskBytes <= 0 || diskBytes > size*9/10 {
		t.Errorf("--history-disk-bytes=%d leaves Pebble too little of the %d-byte volume (its compactions and log need room)", diskBytes, size)
	}
	if flags["--history-retention"] == "" {
		t.Error("no --history-retention")
	}
	if !hasService(objs, sts.Spec.ServiceName) {
		t.Errorf("the StatefulSet's serviceName %q is no Service of deploy/durable", sts.Spec.ServiceName)
	}

	bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub")
	args := append(slices.Clone(c.Args), "--version")
	if out, err := exec.CommandContext(ctxFor(t), bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("informerhub %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	names, warnings, err := dryRun(t, k, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		t.Errorf("kubectl warned: %s", w)
	}
	if !slices.Contains(names, "statefulset.apps/informerhub") {
		t.Errorf("the dry run accepted %v, want the StatefulSet among them", names)
	}
}

func hasService(objs []*unstructured.Unstructured, name string) bool {
	for _, obj := range objs {
		if obj.GetKind() == "Service" && obj.GetName() == name {
			return true
		}
	}
	return false
}
