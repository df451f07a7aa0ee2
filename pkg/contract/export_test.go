package contract

// CompileSchemas exposes compileSchemas to the external tests.
var CompileSchemas = compileSchemas
