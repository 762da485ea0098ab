package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newDocsCmd() *cobra.Command {
	docs := &cobra.Command{
		Use:   "docs",
		Short: "Generate documentation",
		Args:  noArgs,
	}
	docs.AddCommand(&cobra.Command{
		Use:   "man DIR",
		Short: "Write man pages for every command into DIR",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := checkPath("docs man: directory", dir); err != nil {
				return err
			}
			date, err := manDate()
			if err != nil {
				return fmt.Errorf("docs man: %w", err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("docs: create %s: %w", dir, err)
			}
			h := manHeader{title: "RDMATOOL", section: "8", date: date, source: "rdmatool " + version, manual: "rdmatool manual"}
			if err := writeManTree(cmd.Root(), h, dir); err != nil {
				return fmt.Errorf("docs: write man pages to %s: %w", dir, err)
			}
			return nil
		},
	})
	return docs
}
