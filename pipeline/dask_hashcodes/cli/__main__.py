from dask_hashcodes.cli.main import main

raise SystemExit(main())
