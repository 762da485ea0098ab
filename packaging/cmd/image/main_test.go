package main

import (
	"archive/tar"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

// testOptions are an image's inputs, with made-up files.
func testOptions(t *testing.T) options {
	t.Helper()
	dir := t.TempDir()
	o := options{
		Binary: filepath.Join(dir, "rdmatool"), Copyright: filepath.Join(dir, "copyright"), License: "../../../LICENSE",
		Version: "v1.2.0-5-gabc1234", Revision: "abc1234", Licenses: "Apache-2.0 AND MIT",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Arch: "amd64",
	}
	for path, content := range map[string]string{o.Binary: "\x7fELF binary", o.Copyright: "Format: …\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// treeFiles reads every file under dir by its relative path.
func treeFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Two runs on the same inputs, in different directories at different
// times, write the same bytes.
func TestRunReproducible(t *testing.T) {
	o := testOptions(t)
	k := t.TempDir()
	if err := os.WriteFile(filepath.Join(k, "kustomization.yaml"), []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs []map[string]string
	for range 2 {
		out := filepath.Join(t.TempDir(), "image")
		if err := run(o, k, out); err != nil {
			t.Fatal(err)
		}
		files := treeFiles(t, out)
		delete(files, "kustomization.yaml") // names k relative to out
		runs = append(runs, files)
	}
	if _, ok := runs[0]["rdmatool_v1.2.0-5-gabc1234.tar"]; !ok {
		t.Errorf("no docker-archive: %v", slices.Sorted(maps.Keys(runs[0])))
	}
	if diff := cmp.Diff(runs[0], runs[1]); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
}

// The image holds the binary, its copyright and LICENSE, root's, at the
// given time, runs rdmatool agent, and carries the OCI labels; the
// docker-archive is tagged rdmatool:VERSION and the OCI layout names it
// VERSION; the kustomization applies the manifests with that image.
func TestRunImage(t *testing.T) {
	o := testOptions(t)
	root := t.TempDir()
	k := filepath.Join(root, "packaging", "kubernetes")
	out := filepath.Join(root, ".lab", "image")
	if err := os.MkdirAll(k, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(k, "kustomization.yaml"), []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(o, k, out); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("rdmatool:" + o.Version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(filepath.Join(out, "rdmatool_"+o.Version+".tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "rdmatool",
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   "https://github.com/rdmatool/rdmatool",
		"org.opencontainers.image.licenses": o.Licenses,
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
	}
	if diff := cmp.Diff(wantLabels, cf.Config.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if !cf.Created.Equal(o.Created) || cf.OS != "linux" || cf.Architecture != "amd64" ||
		!slices.Equal(cf.Config.Entrypoint, []string{"/usr/sbin/rdmatool"}) || !slices.Equal(cf.Config.Cmd, []string{"agent"}) {
		t.Errorf("config: created %v, %s/%s, entrypoint %v, cmd %v", cf.Created, cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		Name string
		Mode int64
		Size int64
	}
	var got []entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(o.Created) {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		got = append(got, entry{h.Name, h.Mode, h.Size})
	}
	license, _ := os.Stat(o.License)
	want := []entry{
		{"usr/", 0o755, 0}, {"usr/sbin/", 0o755, 0}, {"usr/share/", 0o755, 0}, {"usr/share/doc/", 0o755, 0},
		{"usr/share/doc/rdmatool/", 0o755, 0},
		{"usr/sbin/rdmatool", 0o755, 11}, {"usr/share/doc/rdmatool/copyright", 0o644, 12},
		{"usr/share/doc/rdmatool/LICENSE", 0o644, license.Size()},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}

	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != o.Version ||
		im.Manifests[0].ArtifactType != "" {
		t.Fatalf("OCI layout index %+v, want one image named %s", im.Manifests, o.Version)
	}
	ociImg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// The docker-archive holds the same config and layer under a Docker
	// manifest.
	config, _ := img.ConfigName()
	ociConfig, _ := ociImg.ConfigName()
	ociLayers, _ := ociImg.Layers()
	diffID, _ := layers[0].DiffID()
	if config != ociConfig || len(ociLayers) != 1 {
		t.Errorf("the OCI layout's config %s, the archive's %s", ociConfig, config)
	} else if ociDiffID, _ := ociLayers[0].DiffID(); ociDiffID != diffID {
		t.Errorf("the OCI layout's layer %s, the archive's %s", ociDiffID, diffID)
	}

	var kz struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(out, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kz); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kz.Resources, []string{"../../packaging/kubernetes"}) || len(kz.Images) != 1 ||
		kz.Images[0].Name != "rdmatool" || kz.Images[0].NewName != "rdmatool" || kz.Images[0].NewTag != o.Version {
		t.Errorf("kustomization.yaml:\n%s", b)
	}
}
