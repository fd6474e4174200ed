from engines.bench.cli import main

raise SystemExit(main())
