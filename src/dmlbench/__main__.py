from dmlbench.cli.app import main

main()
