from portal.cli.main import main

raise SystemExit(main())
