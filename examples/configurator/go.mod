module example.com/gqaconfigurator

go 1.26.8

require github.com/kvhost/kvhost v0.0.0

// The configurator is built against the sdk of this checkout. A configurator
// kept elsewhere would require a released kvhost version instead.
replace github.com/kvhost/kvhost => ../..
