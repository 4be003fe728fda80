// Package docs holds phasepay's documentation (the *.md files beside this
// one). It has no code; its test keeps the docs honest: every test that
// pitfalls.md or a package doc cites exists, every reference to a pitfall
// names its entry, and every relative link points somewhere real.
package docs
