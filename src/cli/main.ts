#!/usr/bin/env node
console.error("skiplock CLI: not built yet"); process.exit(1);
