package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// What a command line may hold, checked before anything runs: every word
// is a command, an argument the command takes or a flag; an unknown one
// is an error (exit status 2), cobra's own commands included (help,
// completion). Errors are one line and quote what was typed cut at
// quote.Max bytes.

// noArgs is cobra.NoArgs with the word quoted and cut.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	return nil
}

// unknownCommand is the error for word where a subcommand of cmd was
// expected, with cobra's suggestion on the same line.
func unknownCommand(cmd *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %s for %q", quote.String(word), cmd.CommandPath())
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return errors.New(msg)
}

// strayArgs is the error for a command that only groups others (rdmatool,
// docs, completion) given a word that is none of them: cobra prints the
// help of such a command and exits 0.
func strayArgs(cmd *cobra.Command) error {
	if cmd == nil || cmd.Runnable() || cmd.Flags().NArg() == 0 {
		return nil
	}
	return unknownCommand(cmd, cmd.Flags().Arg(0))
}

// strictHelp prints cmd's help unless strayArgs refuses the command line,
// which runRoot then reports.
func strictHelp(help func(*cobra.Command, []string)) func(*cobra.Command, []string) {
	return func(cmd *cobra.Command, args []string) {
		if strayArgs(cmd) == nil {
			help(cmd, args)
		}
	}
}

// strictDefaults holds the commands cobra adds to root when it runs
// (help, completion and its shells) to the rules of the others: help of
// an unknown topic and a shell completion does not know are errors. It
// is called once root writes where it will run: completion's commands
// keep the writer they were made with.
func strictDefaults(root *cobra.Command, args []string) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			help := c.Run
			c.Run = nil
			c.RunE = func(c *cobra.Command, topic []string) error {
				if err := checkHelpTopic(c.Root(), topic); err != nil {
					return err
				}
				help(c, topic)
				return nil
			}
		case "completion":
			for _, shell := range c.Commands() {
				shell.Args = noArgs
			}
		}
	}
}

// checkHelpTopic refuses a help topic that is not a command path:
// "rdmatool help bogus", "rdmatool help dev show" (show is dev's
// argument, not a command).
func checkHelpTopic(root *cobra.Command, topic []string) error {
	cmd, rest, err := root.Find(topic)
	if err == nil && len(rest) == 0 {
		return nil
	}
	what := quote.String(strings.Join(topic, " "))
	if cmd != nil && cmd != root && len(rest) > 0 {
		return fmt.Errorf("unknown help topic %s: %s is not a command of %q", what, quote.String(rest[0]), cmd.CommandPath())
	}
	return fmt.Errorf("unknown help topic %s (rdmatool help lists the commands)", what)
}

// flagError keeps pflag's errors as they are for what fits on a line, and
// quotes and cuts at quote.Max bytes what does not (a flag name or value
// longer than that, or with a control character in it). A string flag
// given twice (onceFlag) names both values.
func flagError(_ *cobra.Command, err error) error {
	var (
		twice   *givenTwiceError
		invalid *pflag.InvalidValueError
		unknown *pflag.NotExistError
		syntax  *pflag.InvalidSyntaxError
		needs   *pflag.ValueRequiredError
	)
	switch {
	case errors.As(err, &unknown) && isNegative(unknown.GetSpecifiedShortnames()):
		// "res qp lqpn -5": a value, not a flag; no value rdmatool takes is
		// negative.
		return fmt.Errorf("-%s: a negative number; no value rdmatool takes is below 0", unknown.GetSpecifiedShortnames())
	case errors.As(err, &twice) && errors.As(err, &invalid):
		name := "--" + invalid.GetFlag().Name
		return fmt.Errorf("%s %s and %s %s: give one", name, quote.String(twice.first), name, quote.String(twice.second))
	case errors.As(err, &invalid) && !fits(invalid.GetValue()):
		return fmt.Errorf("invalid argument %s for \"--%s\" flag: not a %s", quote.String(invalid.GetValue()), invalid.GetFlag().Name, invalid.GetFlag().Value.Type())
	case errors.As(err, &unknown) && (!fits(unknown.GetSpecifiedName()) || !fits(unknown.GetSpecifiedShortnames())):
		if s := unknown.GetSpecifiedShortnames(); s != "" {
			return fmt.Errorf("unknown shorthand flag %s in %s", quote.String(unknown.GetSpecifiedName()), quote.String("-"+s))
		}
		return fmt.Errorf("unknown flag %s", quote.String("--"+unknown.GetSpecifiedName()))
	case errors.As(err, &syntax) && !fits(syntax.GetSpecifiedFlag()):
		return fmt.Errorf("bad flag syntax: %s", quote.String(syntax.GetSpecifiedFlag()))
	case errors.As(err, &needs) && !fits(needs.GetSpecifiedShortnames()):
		return fmt.Errorf("flag needs an argument: %s in %s", quote.String(needs.GetSpecifiedName()), quote.String("-"+needs.GetSpecifiedShortnames()))
	}
	return err
}

// isNegative reports whether "-"+s is a negative number: s is digits.
func isNegative(s string) bool {
	return s != "" && len(s) <= quote.Max && strings.Trim(s, "0123456789.") == "" && strings.ContainsAny(s[:1], "0123456789")
}

// fits reports whether s may appear in an error as it is: short and
// printable.
func fits(s string) bool { return len(s) <= quote.Max && quote.Text(s) == s }

// onceFlag is a string flag that may be given once: a second --dev would
// otherwise replace the first without a word.
type onceFlag struct {
	value *string
	set   bool
}

// newOnceFlag defines a string flag that refuses a second value.
func newOnceFlag(fs *pflag.FlagSet, p *string, name, value, usage string) {
	*p = value
	fs.Var(&onceFlag{value: p}, name, usage)
}

func (f *onceFlag) String() string { return *f.value }
func (f *onceFlag) Type() string   { return "string" }

func (f *onceFlag) Set(s string) error {
	if f.set {
		return &givenTwiceError{first: *f.value, second: s}
	}
	*f.value, f.set = s, true
	return nil
}

// givenTwiceError is a onceFlag given a second value; flagError names the
// flag.
type givenTwiceError struct{ first, second string }

func (e *givenTwiceError) Error() string {
	return "given twice: " + quote.String(e.first) + " and " + quote.String(e.second)
}
