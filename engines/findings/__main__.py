from engines.findings.cli import main

raise SystemExit(main())
