from inferd.cli import main

raise SystemExit(main())
