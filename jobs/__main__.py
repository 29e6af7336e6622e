from dhash.jobs.cli import main

raise SystemExit(main())
