package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDepends(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  string // apt-cache depends --no-recommends ... output, as apt prints it
		want []string
	}{
		{
			name: "meta package",
			out:  "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n",
			want: []string{"linux-image-6.1.0-56-amd64"},
		},
		{
			// bookworm's linux-image-6.1.0-56-amd64: the or-group's first
			// member is a real package, the rest and the virtual package's
			// providers are not dependencies of their own.
			name: "bookworm image with an or-group",
			out: "linux-image-6.1.0-56-amd64\n" +
				"  Depends: kmod\n" +
				"  Depends: linux-base\n" +
				" |Depends: initramfs-tools\n" +
				"  Depends: <linux-initramfs-tool>\n" +
				"    dracut\n" +
				"    initramfs-tools\n" +
				"    tiny-initramfs\n",
			want: []string{"kmod", "linux-base", "initramfs-tools"},
		},
		{
			// sid's split image package: the or-group sits between the
			// packages the build needs, which must all survive it.
			name: "sid image split into binary and modules",
			out: "linux-image-7.2.13+deb14-amd64\n" +
				"  Depends: linux-base-7.2.13+deb14\n" +
				" |Depends: dracut\n" +
				" |Depends: initramfs-tools\n" +
				"  Depends: <linux-initramfs-tool>\n" +
				"    dracut\n" +
				"    initramfs-tools\n" +
				"    tiny-initramfs\n" +
				"  Depends: linux-binary-7.2.13+deb14-amd64\n" +
				"  Depends: linux-modules-7.2.13+deb14-amd64\n",
			want: []string{
				"linux-base-7.2.13+deb14", "dracut",
				"linux-binary-7.2.13+deb14-amd64", "linux-modules-7.2.13+deb14-amd64",
			},
		},
		{
			name: "PreDepends count as dependencies",
			out:  "coreutils\n  PreDepends: libacl1\n  PreDepends: libc6\n  Depends: libgmp10\n",
			want: []string{"libacl1", "libc6", "libgmp10"},
		},
		{
			name: "or-group of PreDepends",
			out:  "p\n |PreDepends: a\n  PreDepends: b\n  PreDepends: c\n",
			want: []string{"a", "c"},
		},
		{
			name: "a lone virtual package names no package",
			out:  "p\n  Depends: <awk>\n    mawk\n    gawk\n  Depends: libc6\n",
			want: []string{"libc6"},
		},
		{
			name: "two packages in one output",
			out:  "coreutils\n  PreDepends: libc6\nlibc6\n  Depends: libgcc-s1\n",
			want: []string{"libc6", "libgcc-s1"},
		},
		{
			name: "other relations are not dependencies",
			out:  "p\n  Depends: a\n  Recommends: b\n  Suggests: c\n  Breaks: d\n  Conflicts: e\n",
			want: []string{"a"},
		},
		{name: "empty", out: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseDepends([]byte(tt.out))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseDepends() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKernelSeries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version string
		want    string
		wantErr bool
	}{
		{version: "6.1.192-2", want: "6.1"},
		{version: "6.1.158-1", want: "6.1"},
		{version: "6.12.117-1~deb12u1", want: "6.12"},
		{version: "6.12.57-1~bpo12+1", want: "6.12"},
		{version: "7.2.13-1", want: "7.2"},
		{version: "7.0~rc7-1~exp1", want: "7.0"},
		{version: "7.0-1", want: "7.0"},
		{version: "", wantErr: true},
		{version: "6", wantErr: true},
		{version: "6.12", wantErr: true},
		{version: "v6.12.1-1", wantErr: true},
		{version: "linux-image-6.1.0-56-amd64", wantErr: true},
		{version: "(none)", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			got, err := kernelSeries(tt.version)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("kernelSeries(%q) = %q, want an error", tt.version, got)
				}
				if !strings.Contains(err.Error(), tt.version) {
					t.Errorf("kernelSeries(%q) error %q does not name the version", tt.version, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("kernelSeries(%q): %v", tt.version, err)
			}
			if got != tt.want {
				t.Errorf("kernelSeries(%q) = %q, want %q", tt.version, got, tt.want)
			}
		})
	}
}

const (
	debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

	// bookworm's installer writes this debian.sources, snapshot comments and all.
	bookwormSources = `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`
	nodesourceSources = `Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
Architectures: amd64
Signed-By: /usr/share/keyrings/nodesource.gpg
`
)

func TestMirrorFromDeb822(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		text        string
		wantURI     string
		wantKeyring string
	}{
		{name: "bookworm debian.sources", text: bookwormSources, wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring},
		{
			name: "security stanza first",
			text: "Types: deb\nURIs: http://security.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n\n" +
				"Types: deb\nURIs: http://ftp.de.debian.org/debian/\nSuites: bookworm\nComponents: main\n",
			wantURI: "http://ftp.de.debian.org/debian/",
		},
		{
			name:    "only updates suites",
			text:    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-updates bookworm-backports\nComponents: main\n",
			wantURI: "",
		},
		{
			name: "disabled stanza",
			text: "Types: deb\nURIs: http://mirror.example.org/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n" +
				"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /etc/apt/keyrings/debian.gpg\n",
			wantURI:     "http://deb.debian.org/debian",
			wantKeyring: "/etc/apt/keyrings/debian.gpg",
		},
		{name: "nodesource", text: nodesourceSources, wantURI: ""},
		{
			name:    "field names in any case",
			text:    "types: deb\nuris: http://deb.debian.org/debian\nsuites: trixie\ncomponents: main\nsigned-by: /k.gpg\n",
			wantURI: "http://deb.debian.org/debian", wantKeyring: "/k.gpg",
		},
		{
			name:    "several URIs",
			text:    "Types: deb\nURIs: http://deb.debian.org/debian-security http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n",
			wantURI: "http://deb.debian.org/debian",
		},
		{
			name:    "commented out fields",
			text:    "Types: deb\n# URIs: http://deb.debian.org/debian\n# Suites: bookworm\n",
			wantURI: "",
		},
		{name: "empty", text: "", wantURI: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uri, keyring := mirrorFromDeb822(tt.text)
			if uri != tt.wantURI || keyring != tt.wantKeyring {
				t.Errorf("mirrorFromDeb822() = %q, %q, want %q, %q", uri, keyring, tt.wantURI, tt.wantKeyring)
			}
		})
	}
}

func TestMirrorFromOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want string
	}{
		{
			name: "classic sources.list",
			text: "deb http://deb.debian.org/debian bookworm main contrib\n" +
				"deb-src http://deb.debian.org/debian bookworm main\n" +
				"deb http://security.debian.org/debian-security bookworm-security main\n" +
				"deb http://deb.debian.org/debian bookworm-updates main\n",
			want: "http://deb.debian.org/debian",
		},
		{
			name: "security and updates come first",
			text: "deb http://security.debian.org/debian-security bookworm-security main\n" +
				"deb http://deb.debian.org/debian bookworm-updates main\n" +
				"deb http://ftp.fr.debian.org/debian bookworm main\n",
			want: "http://ftp.fr.debian.org/debian",
		},
		{
			name: "options in brackets",
			text: "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n",
			want: "http://deb.debian.org/debian",
		},
		{
			name: "one option",
			text: "deb [arch=amd64] http://deb.debian.org/debian bookworm main\n",
			want: "http://deb.debian.org/debian",
		},
		{
			name: "options with spaces inside the brackets",
			text: "deb [ arch=amd64 ] http://deb.debian.org/debian bookworm main\n",
			want: "http://deb.debian.org/debian",
		},
		{
			name: "old-style security suite",
			text: "deb http://security.debian.org/ buster/updates main\n",
			want: "",
		},
		{
			name: "commented out",
			text: "# deb http://deb.debian.org/debian bookworm main\n#deb http://deb.debian.org/debian bookworm main\n",
			want: "",
		},
		{name: "source only", text: "deb-src http://deb.debian.org/debian bookworm main\n", want: ""},
		{name: "not Debian", text: "deb https://deb.nodesource.com/node_20.x nodistro main\n", want: ""},
		{name: "options and nothing else", text: "deb [arch=amd64] http://deb.debian.org/debian\n", want: ""},
		{name: "unterminated options", text: "deb [arch=amd64 http://deb.debian.org/debian bookworm main\n", want: ""},
		{name: "empty", text: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirrorFromOneLine(tt.text); got != tt.want {
				t.Errorf("mirrorFromOneLine() = %q, want %q", got, tt.want)
			}
		})
	}
}

// writeEtc creates an apt configuration directory holding files (relative
// path to content) and returns it.
func writeEtc(t *testing.T, files map[string]string) string {
	t.Helper()
	etc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(etc, "sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return etc
}

func TestHostMirror(t *testing.T) {
	t.Parallel()
	dockerSources := "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\nComponents: stable\nSigned-By: /etc/apt/keyrings/docker.asc\n"
	tests := []struct {
		name        string
		files       map[string]string
		wantURI     string
		wantKeyring string
		wantErr     bool
		bug         string
	}{
		{
			name:    "deb822 debian.sources",
			files:   map[string]string{"sources.list.d/debian.sources": bookwormSources},
			wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring,
		},
		{
			name: "nodesource deb822 beside debian.sources",
			files: map[string]string{
				"sources.list.d/debian.sources":     bookwormSources,
				"sources.list.d/nodesource.sources": nodesourceSources,
			},
			wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring,
		},
		{
			name: "deb822 wins over sources.list",
			files: map[string]string{
				"sources.list":                  "deb http://ftp.fr.debian.org/debian bookworm main\n",
				"sources.list.d/debian.sources": bookwormSources,
			},
			wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring,
		},
		{
			name: "one-line sources.list behind a non-Debian deb822 file",
			files: map[string]string{
				"sources.list":                      "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.fr.debian.org/debian bookworm main\n",
				"sources.list.d/nodesource.sources": nodesourceSources,
			},
			wantURI: "http://ftp.fr.debian.org/debian", wantKeyring: debianKeyring,
		},
		{
			name: "one-line file in sources.list.d",
			files: map[string]string{
				"sources.list":             "# see sources.list.d\n",
				"sources.list.d/main.list": "deb http://deb.debian.org/debian trixie main\n",
			},
			wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring,
		},
		{
			name: "disabled and security-only files",
			files: map[string]string{
				"sources.list.d/a.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nEnabled: no\n",
				"sources.list":             "deb http://security.debian.org/debian-security bookworm-security main\n",
			},
			wantErr: true,
		},
		{
			// Docker's install guide writes docker.sources; its URI contains
			// "debian" and its suite is the release name.
			name: "Docker's deb822 file beside a one-line sources.list",
			files: map[string]string{
				"sources.list":                  "deb http://deb.debian.org/debian bookworm main\n",
				"sources.list.d/docker.sources": dockerSources,
			},
			wantURI: "http://deb.debian.org/debian", wantKeyring: debianKeyring,
			bug: "hostMirror takes https://download.docker.com/linux/debian (component stable) for the Debian mirror",
		},
		{name: "no configuration", files: map[string]string{}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			etc := writeEtc(t, tt.files)
			uri, keyring, err := hostMirror(etc)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("hostMirror() = %q, %q, want an error", uri, keyring)
				}
				if !strings.Contains(err.Error(), etc) {
					t.Errorf("hostMirror() error %q does not name %s", err, etc)
				}
				return
			}
			if err != nil {
				t.Fatalf("hostMirror(): %v", err)
			}
			if uri != tt.wantURI || keyring != tt.wantKeyring {
				t.Errorf("hostMirror() = %q, %q, want %q, %q", uri, keyring, tt.wantURI, tt.wantKeyring)
			}
		})
	}
}
