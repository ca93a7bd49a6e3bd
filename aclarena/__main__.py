from aclarena.cli import main

raise SystemExit(main())
